"""What the audit proxy costs a client, what it survives, and whether it leaks (issue 25).

Three measurements, each written as JSON under ``benchmarks/results/proxy/`` with its provenance
(command, git commit, threads; the machine is shared: the load average is recorded before and
after):

* ``leak``: 1,000 requests of every kind (plain, 5xx, malformed JSON, cut stream, full stream)
  through the proxy to a small real HTTP server that misbehaves on purpose (the one of
  tests/test_proxy_faults.py); the proxy's open file descriptors, its upstream connections and
  its resident memory are sampled every 100 requests. No model is needed. ``--where thread``
  (default) runs the proxy in a thread of the benchmark, whose RSS then includes the stub
  upstream (a thread per connection) and the client; ``--where process`` runs each ``--arm`` as a
  proxy process of its own (``proxy-child``: the proxy app without an auditor under uvicorn, as
  ``mnemoscope proxy`` runs it, plus ``GET /_bench/memory``), sends every request to every arm in
  turn (or ``--clients N`` at once) and samples where the memory is: RSS, SQLite's allocations,
  the C heap (glibc ``mallinfo2``, arenas), gc-tracked objects by type, full collections; the
  growth is the least-squares slope of RSS over the samples from ``--warmup`` to the end, per
  10,000 requests (docs/proxy.md "Memory").
* ``latency``: streamed answers from a real llama.cpp server (the default model) through the
  official ``openai`` client, time to first token (first chunk with content) and time to the end
  of the stream, direct vs through the proxy (``mnemoscope proxy`` in its own process) with
  auditing off and on. Rounds send one request per path, one at a time, in rotating order; with
  auditing on, the next request waits until the previous audit is logged (``--gap audit``: the
  proxy's own cost) or not (``--gap none``: the audit's load on the same server included). The
  proxy arms are compared with the direct one round by round (median paired difference and
  ratio, bootstrap CIs).
* ``load``: N concurrent clients (bounded: ``--n`` requests and ``--max-seconds`` per arm) of the
  official ``openai`` client send chat requests, non-streamed then streamed, direct vs through
  the proxy (``--no-audit`` / auditing with a bounded queue); per arm: requests/s, p50/p99
  latency (and TTFT for streams), error rate, the audits' statuses (shed = ``skipped``), and the
  proxy process's RSS, fds, threads and CPU sampled every second.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_proxy.py leak --n 1000
    OMP_NUM_THREADS=1 python benchmarks/bench_proxy.py leak --where process --n 10000 --warmup 3000 \
        --arm "before=--cache-kb 8192 --no-gc-freeze" --arm "after="
    OMP_NUM_THREADS=1 python benchmarks/bench_proxy.py latency --n 30 --threads 1 --profile DIR
    OMP_NUM_THREADS=1 python benchmarks/bench_proxy.py load --clients 4 --n 48 --threads 1 --profile DIR
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import socket
import statistics
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "proxy"
CTX = "Quenmar is a small town in the north. The river Zorblat runs through Quenmar."
QUERY = "Which river runs through Quenmar?"
MESSAGES = [
    {"role": "system", "content": "You are a terse assistant. Answer in one short sentence."},
    {"role": "user", "content": f"Context: {CTX}\n\nQuestion: {QUERY}"},
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Proxy:
    """The proxy app under uvicorn in a thread of this process (its fds and RSS are ours)."""

    def __init__(
        self, upstream: str, db: Path, auditor: Any = None, cache_kb: int | None = None, **settings: Any
    ):
        import uvicorn

        from mnemoscope.server.proxy import ProxySettings, create_proxy_app
        from mnemoscope.server.storage import open_store

        store = open_store(db)
        if cache_kb is not None:  # an experiment: the log's SQLite page cache bounded to cache_kb
            store._conn.execute(f"PRAGMA cache_size=-{int(cache_kb)}")
        self.store = store
        app = create_proxy_app(ProxySettings(upstream=upstream, **settings), auditor=auditor, store=store)
        self.port = _free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        t0 = time.monotonic()
        while not self.server.started:
            if time.monotonic() - t0 > 30:
                raise RuntimeError("the proxy did not start")
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{self.port}"

    def health(self) -> dict[str, Any]:
        import httpx

        return dict(httpx.get(f"{self.url}/mnemoscope/health", timeout=10).json())

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=120)


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _sockets_to(port: int) -> int:
    """Established TCP connections of this process to ``port`` (the proxy's upstream pool)."""
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if parts[3] == "01" and int(parts[2].split(":")[1], 16) == port:
                n += 1
    return n


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _release_and_rss(proxy: Proxy) -> float:
    """RSS after handing back what is cached, not held: the log's SQLite page cache
    (``PRAGMA shrink_memory``, under the store's lock) and the C heap's free pages
    (glibc ``malloc_trim``). Growth left after this is memory still in use."""
    import ctypes

    store = proxy.store
    with store._lock:
        store._conn.execute("PRAGMA shrink_memory")
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return round(_rss_mb(), 1)


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    i = min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))
    return xs[i]


# -- leak ---------------------------------------------------------------------------------------------


def run_leak(args: argparse.Namespace) -> dict[str, Any]:
    import tempfile

    import httpx

    sys.path.insert(0, str(ROOT / "tests"))
    from http.server import ThreadingHTTPServer

    from test_proxy_faults import _Bad  # the misbehaving upstream of the fault tests

    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Bad)
    srv.daemon_threads = True
    srv.seen = []  # type: ignore[attr-defined]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    up_port = srv.server_address[1]
    tmp = Path(tempfile.mkdtemp())
    proxy = Proxy(
        f"http://127.0.0.1:{up_port}/v1", tmp / "audit.db", cache_kb=args.sqlite_cache_kb, timeout=5.0
    )
    modes = [("ok", False), ("5xx", False), ("malformed", False), ("cut", True), ("ok", True)]
    samples = []
    t0 = time.perf_counter()
    outcomes: dict[str, int] = {}
    snap0: Any = None
    every = max(100, args.n // 100)
    with httpx.Client(timeout=30) as c:
        for i in range(args.n + 1):
            if i % every == 0 or i == args.warmup:
                srv.seen.clear()  # type: ignore[attr-defined]
                samples.append(
                    {
                        "requests": i,
                        "fds": _fds(),
                        "upstream_connections": _sockets_to(up_port),
                        "rss_mb": round(_rss_mb(), 1),
                        **({"rss_mb_after_release": _release_and_rss(proxy)} if args.release else {}),
                        "python_heap_mb": None
                        if snap0 is None
                        else round(tracemalloc.get_traced_memory()[0] / 2**20, 2),
                    }
                )
            if i == args.warmup and args.tracemalloc:
                tracemalloc.start(8)
                snap0 = tracemalloc.take_snapshot()
            if i == args.n:
                break
            model, stream = modes[i % len(modes)]
            body = {"model": model, "messages": MESSAGES, "stream": stream, "mnemoscope": {"context": CTX}}
            try:
                with c.stream("POST", f"{proxy.url}/v1/chat/completions", json=body) as r:
                    for _ in r.iter_raw():
                        pass
                    key = f"{model}{'-stream' if stream else ''}: HTTP {r.status_code}"
            except httpx.HTTPError as e:
                key = f"{model}{'-stream' if stream else ''}: {type(e).__name__}"
            outcomes[key] = outcomes.get(key, 0) + 1
    wall = time.perf_counter() - t0
    growth: list[dict[str, Any]] | None = None
    if snap0 is not None:  # Python allocations alive now that were not after the warm-up, by line
        stats = tracemalloc.take_snapshot().compare_to(snap0, "lineno")
        tracemalloc.stop()
        growth = [
            {
                "where": str(st.traceback[0]),
                "size_diff_kb": round(st.size_diff / 1024, 1),
                "count_diff": st.count_diff,
            }
            for st in stats[:15]
        ]
    health = proxy.health()
    proxy.stop()
    srv.shutdown()
    first, last = samples[0], samples[-1]
    warm = next((x for x in samples if x["requests"] == args.warmup), samples[0])
    per_10k = 10_000 / max(1, args.n - args.warmup)
    released = (
        None
        if not args.release
        else round((last["rss_mb_after_release"] - warm["rss_mb_after_release"]) * per_10k, 2)
    )
    return {
        "rss_after_release_growth_after_warmup_mb_per_10k": released,
        "sqlite_cache_kb": args.sqlite_cache_kb,
        "warmup_requests": args.warmup,
        "rss_growth_after_warmup_mb_per_10k": round((last["rss_mb"] - warm["rss_mb"]) * per_10k, 2),
        "rss_slope_after_warmup_mb_per_10k": _slope_per_10k(
            [float(x["requests"]) for x in samples if x["requests"] >= args.warmup],
            [x["rss_mb"] for x in samples if x["requests"] >= args.warmup],
        ),
        "tracemalloc_growth_after_warmup": growth,
        "what": "fds, upstream connections and RSS of the proxy over N mixed requests (ok, 5xx, malformed, cut stream, stream)",
        "n_requests": args.n,
        "wall_s": round(wall, 2),
        "samples": samples,
        "outcomes": outcomes,
        "proxy_counts": health,
        "delta_after_warmup": {
            "fds": last["fds"] - warm["fds"],
            "upstream_connections": last["upstream_connections"] - warm["upstream_connections"],
            "rss_mb": round(last["rss_mb"] - warm["rss_mb"], 1),
        },
        "delta_from_start": {
            "fds": last["fds"] - first["fds"],
            "rss_mb": round(last["rss_mb"] - first["rss_mb"], 1),
        },
    }


# -- leak, the proxy in its own process (as deployed) -------------------------------------------------

_MODES = [("ok", False), ("5xx", False), ("malformed", False), ("cut", True), ("ok", True)]


def _memory_state(store: Any, release: bool = False, collect: bool = False) -> dict[str, Any]:
    """This process's memory, by where it is (read by the proxy child at every sample): RSS (anonymous
    and file-backed), the C heap (glibc ``mallinfo2``: in use, free but kept, arenas), SQLite's own
    allocations (page cache included, ``sqlite3_memory_used``), Python's traced heap (if tracing),
    gc-tracked objects and threads. ``release``: then SQLite ``shrink_memory`` and ``malloc_trim(0)``,
    and the RSS after them."""
    import ctypes
    import ctypes.util
    import gc
    import tempfile

    st = {
        ln.split(":")[0]: ln.split(":")[1].strip()
        for ln in Path("/proc/self/status").read_text().splitlines()
    }

    def kb(key: str) -> float:
        return round(int(st[key].split()[0]) / 1024, 2) if key in st else float("nan")

    out: dict[str, Any] = {
        "rss_mb": kb("VmRSS"),
        "rss_anon_mb": kb("RssAnon"),
        "rss_file_mb": kb("RssFile"),
        "threads": int(st["Threads"]),
        "gc_objects": len(gc.get_objects()),
        "python_heap_mb": round(tracemalloc.get_traced_memory()[0] / 2**20, 2)
        if tracemalloc.is_tracing()
        else None,
    }
    try:
        lib = ctypes.CDLL("libsqlite3.so.0")
        lib.sqlite3_memory_used.restype = ctypes.c_int64
        out["sqlite_mb"] = round(lib.sqlite3_memory_used() / 2**20, 2)
    except (OSError, AttributeError):
        out["sqlite_mb"] = None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        have = hasattr(libc, "mallinfo2")
    except OSError:
        have = False
    if have:

        class MallInfo2(ctypes.Structure):
            _fields_ = [
                (f, ctypes.c_size_t)
                for f in (
                    "arena", "ordblks", "smblks", "hblks", "hblkhd",
                    "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
                )
            ]  # fmt: skip

        libc.mallinfo2.restype = MallInfo2
        mi = libc.mallinfo2()
        out["malloc_in_use_mb"] = round((mi.uordblks + mi.hblkhd) / 2**20, 2)
        out["malloc_free_kept_mb"] = round(mi.fordblks / 2**20, 2)
        out["malloc_mmapped_mb"] = round(mi.hblkhd / 2**20, 2)
        libc.fopen.restype = ctypes.c_void_p
        libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        libc.fclose.argtypes = [ctypes.c_void_p]
        libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
        with tempfile.NamedTemporaryFile(suffix=".xml") as f:
            fp = libc.fopen(f.name.encode(), b"w")
            libc.malloc_info(0, fp)
            libc.fclose(fp)
            out["malloc_arenas"] = Path(f.name).read_text().count("<heap nr=")
    out["gc_collections"] = [int(g["collections"]) for g in gc.get_stats()]
    if collect:  # a full collection: what the cyclic garbage waiting for one held
        out["gc_collected"] = gc.collect()
        out["gc_objects_after_collect"] = len(gc.get_objects())
        out["rss_mb_after_collect"] = round(_rss_mb(), 2)
    if release:
        with store._lock:
            store._conn.execute("PRAGMA shrink_memory")
        if have:
            libc.malloc_trim(0)
        out["rss_mb_after_release"] = round(_rss_mb(), 2)
    return out


def run_proxy_child(args: argparse.Namespace) -> int:
    """The leak benchmark's proxy (``leak --where process``): the proxy app with no auditor (every audit
    logged as ``failed``, "no auditor") and its log, under uvicorn in the main thread as ``mnemoscope
    proxy`` runs it, plus ``GET /_bench/memory`` (:func:`_memory_state`)."""
    import ctypes
    import ctypes.util
    import gc
    from collections import Counter

    if args.arena_max:  # an experiment: glibc's M_ARENA_MAX (-8) at start, before threads make arenas
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        if libc.mallopt(-8, args.arena_max) != 1:
            raise RuntimeError("mallopt(M_ARENA_MAX) failed")
    if args.tracemalloc:
        tracemalloc.start(1)
    import uvicorn
    from fastapi.routing import APIRoute

    from mnemoscope.server.proxy import ProxySettings, create_proxy_app
    from mnemoscope.server.storage import open_store

    store = open_store(args.db)
    if args.cache_kb is not None:
        store._conn.execute(f"PRAGMA cache_size=-{int(args.cache_kb)}")
    trims: list[float] = []  # durations (ms) of the malloc_trim calls
    if args.trim_every:  # an experiment: malloc_trim(0) after every N appends, in the appending thread
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        append, n_appended = store.append, [0]

        def trimming_append(records: Any) -> Any:
            seqs = append(records)
            n_appended[0] += 1
            if n_appended[0] % args.trim_every == 0:
                t = time.perf_counter()
                libc.malloc_trim(0)
                trims.append((time.perf_counter() - t) * 1000)
            return seqs

        store.append = trimming_append
    settings = ProxySettings(upstream=args.upstream, timeout=5.0, gc_freeze=not args.no_gc_freeze)
    app = create_proxy_app(settings, auditor=None, store=store)
    snap: list[Any] = []
    types0: dict[str, int] = {}

    async def memory(release: bool = False, snapshot: bool = False, collect: bool = False) -> Any:
        if snapshot:
            t_gc[1] = len(full_gc)
        gcs = full_gc[int(t_gc[1]) :]  # since the warm-up, before this call's own collection
        out = _memory_state(store, release, collect)
        out["gc_full_since_warmup"] = {
            "n": len(gcs),
            "total_ms": round(sum(gcs), 2),
            "max_ms": round(max(gcs), 2) if gcs else None,
        }
        out["gc_frozen"] = gc.get_freeze_count()
        if trims:
            out["malloc_trims_ms"] = {"n": len(trims), "median": statistics.median(trims), "max": max(trims)}
        by_type = Counter(type(o).__qualname__ for o in gc.get_objects())
        if snapshot:
            types0.clear()
            types0.update(by_type)
        elif types0:  # gc-tracked objects by type: the most grown since the warm-up
            diff = Counter(by_type)
            diff.subtract(types0)
            out["gc_types_growth"] = dict(diff.most_common(12))
        if tracemalloc.is_tracing():
            if snapshot:  # the reference (end of the warm-up)
                snap[:] = [tracemalloc.take_snapshot()]
            elif snap:
                stats = tracemalloc.take_snapshot().compare_to(snap[0], "lineno")
                out["tracemalloc_growth"] = [
                    {
                        "where": str(s.traceback[0]),
                        "size_diff_kb": round(s.size_diff / 1024, 1),
                        "count_diff": s.count_diff,
                    }
                    for s in stats[:15]
                ]
        return out

    app.router.routes.insert(0, APIRoute("/_bench/memory", memory, methods=["GET"]))  # before the catch-all
    full_gc: list[float] = []  # durations (ms) of the full collections since start
    t_gc = [0.0, 0.0]  # start of the collection running, how many ran before the warm-up

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") == 2:
            if phase == "start":
                t_gc[0] = time.perf_counter()
            else:
                full_gc.append((time.perf_counter() - t_gc[0]) * 1000)

    gc.callbacks.append(on_gc)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="error")
    return 0


class _Spawned:
    """A proxy in a process of its own, started by :meth:`_spawn` and answering
    ``/mnemoscope/health``: what :class:`_LeakChild` and :class:`ProxyProcess` share."""

    port: int
    url: str
    proc: Any
    _log: Any

    def _spawn(self, command: list[str], log: Path, what: str) -> None:
        """Start ``command`` (one torch thread) and wait up to 300 s for its health route."""
        import subprocess

        import httpx

        self.command = command
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        self.url = f"http://127.0.0.1:{self.port}"
        t0 = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{what} exited with {self.proc.returncode}: see {self._log.name}")
            try:
                if httpx.get(f"{self.url}/mnemoscope/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() - t0 > 300:
                self.stop()
                raise RuntimeError(f"{what} did not start within 300 s")
            time.sleep(0.2)

    def health(self) -> dict[str, Any]:
        import httpx

        return dict(httpx.get(f"{self.url}/mnemoscope/health", timeout=30).json())

    def stop(self) -> None:
        import subprocess

        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()


class _LeakChild(_Spawned):
    """One arm of ``leak --where process``: :func:`run_proxy_child` in its own process."""

    def __init__(self, name: str, upstream: str, db: Path, extra: list[str], tracemalloc_on: bool):
        self.name = name
        self.port = _free_port()
        command = [
            sys.executable, str(Path(__file__).resolve()), "proxy-child", "--upstream", upstream,
            "--db", str(db), "--port", str(self.port), *(["--tracemalloc"] if tracemalloc_on else []), *extra,
        ]  # fmt: skip
        self._spawn(command, db.with_suffix(".log"), "the proxy child")

    def sample(self, client: Any, release: bool, snapshot: bool, collect: bool = False) -> dict[str, Any]:
        params = {"release": release, "snapshot": snapshot, "collect": collect}
        r = client.get(f"{self.url}/_bench/memory", params=params, timeout=600)
        r.raise_for_status()
        out = dict(r.json())
        out["fds"] = len(os.listdir(f"/proc/{self.proc.pid}/fd"))
        out["cpu_s"] = round(_proc_cpu(self.proc.pid), 2)
        return out


def _slope_per_10k(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of ``ys`` against ``xs`` (requests), times 10,000."""
    if len(xs) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return (
        None
        if sxx == 0
        else round(sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx * 1e4, 3)
    )


def run_leak_process(args: argparse.Namespace) -> dict[str, Any]:
    """Each arm a proxy process of its own; every request mode is sent to every arm in turn (rotating
    which arm goes first), so the arms see the same requests under the same machine load."""
    import shlex
    import tempfile

    import httpx

    sys.path.insert(0, str(ROOT / "tests"))
    from http.server import ThreadingHTTPServer

    from test_proxy_faults import _Bad  # the misbehaving upstream of the fault tests

    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Bad)
    srv.daemon_threads = True
    srv.seen = []  # type: ignore[attr-defined]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    up_port = srv.server_address[1]
    tmp = Path(tempfile.mkdtemp())
    arms: dict[str, list[str]] = {}
    for spec in args.arm or ["default="]:
        name, _, extra = spec.partition("=")
        arms[name] = shlex.split(extra)
    children: dict[str, _LeakChild] = {}
    try:
        for name, extra in arms.items():
            children[name] = _LeakChild(
                name, f"http://127.0.0.1:{up_port}/v1", tmp / f"{name}.db", extra, args.tracemalloc
            )
        names = list(children)
        samples: dict[str, list[dict[str, Any]]] = {k: [] for k in names}
        outcomes: dict[str, dict[str, int]] = {k: {} for k in names}
        every = args.every or max(100, args.n // 100)

        def one(c: Any, name: str, i: int) -> None:
            model, stream = _MODES[i % len(_MODES)]
            body = {"model": model, "messages": MESSAGES, "stream": stream, "mnemoscope": {"context": CTX}}
            try:
                with c.stream("POST", f"{children[name].url}/v1/chat/completions", json=body) as r:
                    for _ in r.iter_raw():
                        pass
                    key = f"{model}{'-stream' if stream else ''}: HTTP {r.status_code}"
            except httpx.HTTPError as e:
                key = f"{model}{'-stream' if stream else ''}: {type(e).__name__}"
            with lock:
                outcomes[name][key] = outcomes[name].get(key, 0) + 1

        from concurrent.futures import ThreadPoolExecutor

        lock = threading.Lock()
        points = sorted({*range(0, args.n + 1, every), args.warmup, args.n})
        t0 = time.perf_counter()
        with httpx.Client(timeout=30) as c, ThreadPoolExecutor(args.clients) as pool:
            done = 0
            for p in points:
                if args.clients == 1:  # one request to every arm in turn (rotating which goes first)
                    for i in range(done, p):
                        for k in range(len(names)):
                            one(c, names[(i + k) % len(names)], i)
                else:  # the requests up to the next sample from --clients threads, to one arm after the other
                    for k in range(len(names)):
                        name = names[(p // every + k) % len(names)]
                        list(pool.map(lambda i, name=name: one(c, name, i), range(done, p)))
                done = p
                srv.seen.clear()  # type: ignore[attr-defined]
                for name in names:
                    s = children[name].sample(c, args.release, snapshot=p == args.warmup, collect=p == args.n)
                    samples[name].append(
                        {"requests": p, "t": round(time.perf_counter() - t0, 1), "load1": _load()[0], **s}
                    )
        wall = time.perf_counter() - t0
        out: dict[str, Any] = {"arms": {}}
        for name in names:
            ss = samples[name]
            post = [x for x in ss if x["requests"] >= args.warmup]
            warm, last = post[0], ss[-1]
            xs = [float(x["requests"]) for x in post]
            rec: dict[str, Any] = {
                "command": " ".join(children[name].command[2:]),
                "rss_slope_after_warmup_mb_per_10k": _slope_per_10k(xs, [x["rss_mb"] for x in post]),
                "rss_after_warmup_to_end_mb": round(last["rss_mb"] - warm["rss_mb"], 2),
                "slopes_after_warmup_per_10k": {
                    k: _slope_per_10k(xs, [x[k] for x in post])
                    for k in (
                        "rss_anon_mb",
                        "rss_file_mb",
                        "sqlite_mb",
                        "malloc_in_use_mb",
                        "malloc_free_kept_mb",
                        "python_heap_mb",
                        "gc_objects",
                        "fds",
                        "threads",
                    )
                    if all(isinstance(x.get(k), (int, float)) for x in post)
                },
                "rss_mb": {"start": ss[0]["rss_mb"], "warm": warm["rss_mb"], "end": last["rss_mb"]},
                "gc_full_collections_after_warmup": last.get("gc_full_since_warmup"),
                "threads_max": max(x["threads"] for x in ss),
                "malloc_arenas_max": max((x.get("malloc_arenas") or 0) for x in ss) or None,
                "at_end_full_gc_collection": {
                    k: last.get(k)
                    for k in ("gc_collected", "gc_objects_after_collect", "rss_mb_after_collect")
                },
                "outcomes": outcomes[name],
                "proxy_counts": children[name].health(),
                "samples": ss,
            }
            if args.release:
                rec["rss_after_release_slope_after_warmup_mb_per_10k"] = _slope_per_10k(
                    xs, [x["rss_mb_after_release"] for x in post]
                )
            if args.tracemalloc:
                rec["tracemalloc_growth_after_warmup"] = last.pop("tracemalloc_growth", None)
            out["arms"][name] = rec
    finally:
        for ch in children.values():
            ch.stop()
        srv.shutdown()
    out.update(
        {
            "what": "RSS (and where it is) of the proxy, each arm in its own process, over N mixed requests "
            "(ok, 5xx, malformed, cut stream, stream) from one client, the arms in turn",
            "where": "process",
            "n_requests_per_arm": args.n,
            "warmup_requests": args.warmup,
            "sample_every": every,
            "clients": args.clients,
            "wall_s": round(wall, 2),
            "flat_definition": "least-squares slope of RSS against requests over the samples from the warm-up "
            "to the end, in MB per 10,000 requests (target < 1)",
        }
    )
    return out


# -- the real llama.cpp server ----------------------------------------------------------------------


def _llama(threads: int, interrupt: bool = True, kind: str = "lcp") -> Any:
    """llama-cpp-python's server (``kind="lcp"``) or llama.cpp's C++ ``llama-server``
    (``"native"``; binary from ``MNEMOSCOPE_LLAMA_SERVER`` or the PATH, as the tests find it).
    ``interrupt=False``: llama-cpp-python's ``--interrupt_requests False`` (by default a new request
    interrupts the stream being generated, which cuts concurrent streams short)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from llama_servers import LlamaCppServer  # the tests' server launcher (python -m llama_cpp.server)
    from mnemoscope.models.loader import default_gguf_path

    if kind == "native":
        from llama_servers import LlamaServerNative

        native = LlamaServerNative(
            default_gguf_path(), n_threads=threads, log_path=Path("/tmp/bench_proxy_llama_server.log")
        )
        native.start(timeout=300)
        return native
    server = LlamaCppServer(
        default_gguf_path(),
        n_threads=threads,
        log_path=Path("/tmp/bench_proxy_llama.log"),
        extra_args=() if interrupt else ("--interrupt_requests", "False"),
    )
    server.start(timeout=300)
    return server


def _auditor(server: Any, profile: str | None) -> Any:
    from mnemoscope.audit.auditor import Auditor
    from mnemoscope.audit.profile import load_endpoint_profile
    from mnemoscope.models.endpoint import EndpointClient, EndpointConfig

    client = EndpointClient(EndpointConfig(server.base_url, concurrency=1, timeout=600))
    if profile is None or not (Path(profile) / "profile.json").is_file():
        import tempfile

        from mnemoscope.audit.calibrate import calibrate
        from mnemoscope.audit.profile import CalibrationConfig
        from mnemoscope.audit.tracing import EndpointTracer
        from mnemoscope.data.records import Record

        verified = ROOT / "benchmarks" / "results" / "verdict" / "verified.jsonl"
        items = [json.loads(x) for x in verified.read_text().splitlines() if x.strip()]
        picked = [it for it in items if it["label"] == 0][:5] + [it for it in items if it["label"] == 1][:5]
        recs = [
            Record(id=it["id"], context=it["context"], query=it["query"], label=it["label"]) for it in picked
        ]
        out = Path(profile) if profile else Path(tempfile.mkdtemp()) / "profile"
        prof = calibrate(
            EndpointTracer(client, chat_template="default"), recs, out, CalibrationConfig(), progress=False
        )
    else:
        prof = load_endpoint_profile(profile)
    return Auditor.from_endpoint(client, prof)


class ProxyProcess(_Spawned):
    """``mnemoscope proxy`` as its own process (as deployed): its fds, threads, RSS and CPU are read
    from ``/proc/<pid>`` without the benchmark's clients in them."""

    def __init__(self, upstream: str, db: Path, profile: str, *args: str, log: Path | None = None):
        self.port = _free_port()
        command = [
            sys.executable, "-m", "mnemoscope", "proxy", "--upstream", upstream, "--profile", profile,
            "--db", str(db), "--host", "127.0.0.1", "--port", str(self.port), *args,
        ]  # fmt: skip
        self._spawn(command, log or db.with_suffix(".log"), "the proxy")

    def sample(self) -> dict[str, float]:
        pid = self.proc.pid
        st = {
            ln.split(":")[0]: ln.split(":")[1].strip()
            for ln in Path(f"/proc/{pid}/status").read_text().splitlines()
        }
        return {
            "t": time.time(),
            "rss_mb": round(int(st["VmRSS"].split()[0]) / 1024, 1),
            "threads": int(st["Threads"]),
            "fds": len(os.listdir(f"/proc/{pid}/fd")),
            "cpu_s": round(_proc_cpu(pid), 2),
        }

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no audit is in flight (bounded)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.health().get("audits_in_flight", 0) == 0:
                return True
            time.sleep(0.5)
        return False


def _proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _Sampler:
    """Samples a :class:`ProxyProcess` every ``every`` seconds in a thread."""

    def __init__(self, proxy: ProxyProcess | None, every: float = 1.0):
        self.proxy, self.every, self.samples = proxy, every, []  # type: ignore[var-annotated]
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.proxy is not None:
                self.samples.append(self.proxy.sample())
            self._stop.wait(self.every)

    def __enter__(self) -> _Sampler:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()
        if self.proxy is not None:
            self.samples.append(self.proxy.sample())

    def summary(self) -> dict[str, Any] | None:
        if not self.samples:
            return None
        first, last = self.samples[0], self.samples[-1]
        return {
            "n_samples": len(self.samples),
            "rss_mb": {
                "first": first["rss_mb"],
                "last": last["rss_mb"],
                "max": max(x["rss_mb"] for x in self.samples),
            },
            "fds": {"first": first["fds"], "last": last["fds"], "max": max(x["fds"] for x in self.samples)},
            "threads": {
                "first": first["threads"],
                "last": last["threads"],
                "max": max(x["threads"] for x in self.samples),
            },
            "proxy_cpu_s": round(last["cpu_s"] - first["cpu_s"], 2),
        }


def _openai(base: str, timeout: float) -> Any:
    import openai

    return openai.OpenAI(base_url=base, api_key="not-needed", max_retries=0, timeout=timeout)


def _messages(tag: str) -> list[dict[str, str]]:
    """MESSAGES with ``tag`` starting the system prompt, so that no request reuses the server's
    prompt cache of another (the audit's own requests fill it): every path pays the same prompt
    evaluation."""
    if not tag:
        return MESSAGES
    return [{**MESSAGES[0], "content": f"[{tag}] {MESSAGES[0]['content']}"}, *MESSAGES[1:]]


def _chat(client: Any, max_tokens: int, tag: str, stream: bool) -> dict[str, Any]:
    """One chat completion through the official ``openai`` client: wall time, TTFT (streams: the
    first chunk with content), the audit id header and (JSON answers) the proxy's audit status."""
    t0 = time.perf_counter()
    raw = client.chat.completions.with_raw_response.create(
        model="smollm2", messages=_messages(tag), temperature=0, max_tokens=max_tokens, stream=stream
    )
    aid = raw.headers.get("x-mnemoscope-audit-id")
    if aid is None and raw.headers.get("x-mnemoscope-audit"):  # JSON answers: the id is in the summary
        aid = json.loads(raw.headers["x-mnemoscope-audit"]).get("id")
    ttft = None
    status = None
    text = ""
    if stream:
        for chunk in raw.parse():
            if chunk.choices and chunk.choices[0].delta.content:
                if ttft is None:
                    ttft = time.perf_counter() - t0
                text += chunk.choices[0].delta.content
    else:
        resp = raw.parse()
        text = resp.choices[0].message.content or ""
        m = (resp.model_extra or {}).get("mnemoscope")
        status = None if m is None else str(m.get("status"))
    return {
        "ttft_s": ttft,
        "total_s": time.perf_counter() - t0,
        "audit_id": aid,
        "status": status,
        "empty": not text.strip(),
    }


def _wait_logged(proxy: Any, aid: str | None, timeout: float = 900) -> dict[str, Any] | None:
    import httpx

    if aid is None:
        return None
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        r = httpx.get(f"{proxy.url}/mnemoscope/audits/{aid}", timeout=30)
        if r.status_code == 200:
            return dict(r.json())
        time.sleep(0.1)
    return None


def _summ(xs: list[float]) -> dict[str, float]:
    return {
        "n": len(xs),
        "median_s": round(statistics.median(xs), 4) if xs else float("nan"),
        "mean_s": round(statistics.fmean(xs), 4) if xs else float("nan"),
        "p90_s": round(_pct(xs, 90), 4),
    }


def _paired(a: list[float | None], b: list[float | None], seed: int = 0) -> dict[str, Any]:
    """Paired comparison of ``b`` (proxy) with ``a`` (direct) over the same rounds: the median of
    the per-round differences and of the ratios b/a - 1, each with a 95 % bootstrap CI."""
    import numpy as np

    pairs = [(x, y) for x, y in zip(a, b, strict=True) if x is not None and y is not None]
    if len(pairs) < 3:
        return {"n": len(pairs)}
    x = np.array([p[0] for p in pairs])
    y = np.array([p[1] for p in pairs])
    d, r = y - x, y / x - 1
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(d), size=(4000, len(d)))
    bd, br = np.median(d[idx], axis=1), np.median(r[idx], axis=1)
    return {
        "n": len(pairs),
        "median_diff_s": round(float(np.median(d)), 4),
        "median_diff_ci95_s": [
            round(float(np.percentile(bd, 2.5)), 4),
            round(float(np.percentile(bd, 97.5)), 4),
        ],
        "median_ratio_minus_1": round(float(np.median(r)), 4),
        "median_ratio_minus_1_ci95": [
            round(float(np.percentile(br, 2.5)), 4),
            round(float(np.percentile(br, 97.5)), 4),
        ],
    }


def _profile_dir(server: Any, profile: str | None) -> str:
    """An endpoint profile folder for the proxies (calibrated there on 10 verified items when empty)."""
    import tempfile

    out = Path(profile) if profile else Path(tempfile.mkdtemp()) / "profile"
    if not (out / "profile.json").is_file():
        _auditor(server, str(out))
    return str(out)


def _proxies(
    server: Any, args: argparse.Namespace, tmp: Path, audit_url: str | None = None
) -> dict[str, ProxyProcess]:
    prof = _profile_dir(server, args.profile)
    off = ProxyProcess(server.base_url, tmp / "off.db", prof, "--no-audit")
    on_args = ["--audit-queue", str(args.audit_queue)]
    if audit_url is not None:  # audits through a second server of the same model
        on_args += ["--audit-endpoint", audit_url]
    if getattr(args, "audit_wait", None) is not None:
        on_args += ["--audit-wait", str(args.audit_wait)]
    on = ProxyProcess(server.base_url, tmp / "on.db", prof, *on_args)
    return {"proxy_audit_off": off, "proxy_audit_on": on}


def run_latency(args: argparse.Namespace) -> dict[str, Any]:
    import tempfile

    server = _llama(args.threads, kind=args.server)
    audit_server = _llama(args.threads, kind=args.server) if args.audit_server == "separate" else None
    tmp = Path(tempfile.mkdtemp())
    procs: dict[str, ProxyProcess] = {}
    try:
        procs = _proxies(server, args, tmp, audit_server.base_url if audit_server is not None else None)
        on = procs["proxy_audit_on"]
        paths = {"direct": server.base_url, **{k: f"{p.url}/v1" for k, p in procs.items()}}
        clients = {k: _openai(v, 600) for k, v in paths.items()}
        for c in clients.values():  # warm-up: the server's prompt cache, the pools
            _chat(c, args.max_tokens, "", True)
        on.wait_idle(900)
        time.sleep(1)
        res: dict[str, list[dict[str, Any]]] = {k: [] for k in paths}
        audits = []
        names = list(paths)
        # all 6 orders in turn: each path is first, second and third equally often, and the direct
        # and the no-audit path follow the auditing path equally often (with --gap none, the request
        # after an auditing one meets its audit on the upstream)
        orders = list(itertools.permutations(names))
        loads = []
        t_run = time.perf_counter()
        for i in range(args.n):
            if args.max_seconds and time.perf_counter() - t_run > args.max_seconds:
                break
            loads.append(os.getloadavg()[0])
            for name in orders[i % len(orders)]:
                # the tag's length is the same on every path (a path's name as the tag made the
                # proxy paths' prompts 2-4 tokens longer than the direct one's: ~10 ms of prefill)
                r = _chat(clients[name], args.max_tokens, f"{i:04d}-{names.index(name)}", True)
                res[name].append(r)
                if name == "proxy_audit_on":
                    rec = _wait_logged(on, r["audit_id"]) if args.gap == "audit" else None
                    if rec is not None:
                        audits.append({"status": rec.get("status"), "latency_ms": rec.get("latency_ms")})
        if args.gap == "none":
            for r in res["proxy_audit_on"]:
                rec = _wait_logged(on, r["audit_id"])
                audits.append(
                    {
                        "status": None if rec is None else rec.get("status"),
                        "latency_ms": None if rec is None else rec.get("latency_ms"),
                    }
                )
        out: dict[str, Any] = {"paths": {}, "rounds": len(res["direct"])}
        for name, rs in res.items():
            out["paths"][name] = {
                "ttft": _summ([r["ttft_s"] for r in rs if r["ttft_s"] is not None]),
                "ttft_missing": sum(r["ttft_s"] is None for r in rs),
                "total_to_done": _summ([r["total_s"] for r in rs]),
            }
        d = out["paths"]["direct"]
        for name in ("proxy_audit_off", "proxy_audit_on"):
            p = out["paths"][name]
            p["ttft_median_vs_direct"] = round(p["ttft"]["median_s"] / d["ttft"]["median_s"] - 1, 4)
            p["total_median_vs_direct"] = round(
                p["total_to_done"]["median_s"] / d["total_to_done"]["median_s"] - 1, 4
            )
            p["ttft_paired_vs_direct"] = _paired(
                [r["ttft_s"] for r in res["direct"]], [r["ttft_s"] for r in res[name]]
            )
            p["total_paired_vs_direct"] = _paired(
                [r["total_s"] for r in res["direct"]], [r["total_s"] for r in res[name]]
            )
        statuses: dict[str, int] = {}
        for a in audits:
            statuses[str(a["status"])] = statuses.get(str(a["status"]), 0) + 1
        lat = [float(a["latency_ms"]) for a in audits if a["latency_ms"] is not None]
        out["audits"] = {"statuses": statuses, "audit_s": _summ([x / 1000 for x in lat])}
        out["loadavg_1min_per_round"] = {
            "min": min(loads),
            "median": statistics.median(loads),
            "max": max(loads),
        }
        out["settings"] = {
            "n_rounds_asked": args.n,
            "client": "the official openai client (stream=True), one request at a time",
            "proxy": "mnemoscope proxy in its own process ("
            + " ".join(procs["proxy_audit_on"].command[3:])
            + ")",
            "prompt_cache": "defeated: each request's system prompt starts with its own tag (same length on "
            "every path); the 6 orders of the paths rotate",
            "max_tokens": args.max_tokens,
            "gap": args.gap,
            "audit_server": args.audit_server,
            "server_threads": args.threads,
            "server_kind": args.server,
            "server": " ".join(server.command[1:]),
        }
        return out
    finally:
        for p in procs.values():
            p.stop()
        server.stop()
        if audit_server is not None:
            audit_server.stop()


def run_load(args: argparse.Namespace) -> dict[str, Any]:
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    server = _llama(args.threads, interrupt=args.interrupt_requests == "true", kind=args.server)
    tmp = Path(tempfile.mkdtemp())
    procs: dict[str, ProxyProcess] = {}
    try:
        procs = _proxies(server, args, tmp)
        paths = {"direct": (server.base_url, None), **{k: (f"{p.url}/v1", p) for k, p in procs.items()}}
        out: dict[str, Any] = {"arms": {}}
        for mode in ("nonstream", "stream"):
            for name, (base, proc) in paths.items():
                arm = f"{name}:{mode}"
                client = _openai(base, args.timeout)
                h0 = proc.health() if proc is not None else None
                results: list[dict[str, Any]] = []
                errors: dict[str, int] = {}
                deadline = time.perf_counter() + args.max_seconds
                not_sent = 0

                def one(
                    i: int, client: Any = client, arm: str = arm, deadline: float = deadline
                ) -> dict[str, Any]:
                    if time.perf_counter() > deadline:
                        return {"not_sent": True}
                    try:
                        return _chat(client, args.max_tokens, f"{arm}-{i}", arm.endswith(":stream"))
                    except Exception as e:  # counted as the arm's errors
                        return {"error": f"{type(e).__name__}: {str(e)[:120]}"}

                load0 = _load()
                t0 = time.perf_counter()
                with _Sampler(proc) as sampler, ThreadPoolExecutor(args.clients) as ex:
                    for r in ex.map(one, range(args.n)):
                        if r.get("not_sent"):
                            not_sent += 1
                        elif "error" in r:
                            errors[r["error"]] = errors.get(r["error"], 0) + 1
                        else:
                            results.append(r)
                wall = time.perf_counter() - t0
                lat = [r["total_s"] for r in results]
                statuses: dict[str, int] = {}
                for r in results:
                    if r["status"] is not None:
                        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
                rec: dict[str, Any] = {
                    "sent": args.n - not_sent,
                    "ok": len(results),
                    "errors": sum(errors.values()),
                    "error_rate": round(sum(errors.values()) / max(1, args.n - not_sent), 4),
                    "error_kinds": errors,
                    "not_sent_time_bound": not_sent,
                    "wall_s": round(wall, 2),
                    "throughput_rps": round(len(results) / wall, 3),
                    "p50_s": round(_pct(lat, 50), 3),
                    "p99_s": round(_pct(lat, 99), 3),
                    "max_s": round(max(lat), 3) if lat else None,
                    "empty_answers": sum(bool(r["empty"]) for r in results),
                    "loadavg_before": load0,
                    "loadavg_after": _load(),
                }
                if mode == "stream":
                    tt = [r["ttft_s"] for r in results if r["ttft_s"] is not None]
                    rec["ttft_p50_s"] = round(_pct(tt, 50), 3)
                    rec["ttft_p99_s"] = round(_pct(tt, 99), 3)
                if statuses:
                    rec["audit_statuses_in_answers"] = statuses
                if proc is not None:
                    idle = proc.wait_idle(args.audit_drain)
                    h1 = proc.health()
                    assert h0 is not None
                    rec["audits_logged_this_arm"] = {
                        k: h1[k] - h0.get(k, 0)
                        for k in h1
                        if k.startswith("n_") and isinstance(h1[k], int) and h1[k] - h0.get(k, 0)
                    }
                    rec["audits_drained"] = idle
                    reasons: dict[str, int] = {}
                    for r in results:  # every audit's logged outcome, with the reason when not audited
                        logged = _wait_logged(proc, r["audit_id"], timeout=30)
                        st = "not logged" if logged is None else str(logged.get("status"))
                        if logged is not None and st != "audited":
                            why = str(logged.get("error") or logged.get("reason") or "")[:160]
                            st = f"{st}: {why}"
                        reasons[st] = reasons.get(st, 0) + 1
                    rec["audit_outcomes_logged"] = reasons
                    rec["proxy_process"] = sampler.summary()
                out["arms"][arm] = rec
                print(
                    arm,
                    json.dumps({k: rec[k] for k in ("ok", "errors", "throughput_rps", "p50_s", "p99_s")}),
                    flush=True,
                )
        out["settings"] = {
            "clients": args.clients,
            "client": "the official openai client, one per arm, shared by the client threads",
            "n_requests_per_arm": args.n,
            "max_seconds_per_arm": args.max_seconds,
            "max_tokens": args.max_tokens,
            "audit_queue": args.audit_queue,
            "audit_wait": args.audit_wait,
            "audit_workers": 1,
            "server_threads": args.threads,
            "server_kind": args.server,
            "server": " ".join(server.command[1:]),
            "interrupt_requests": args.interrupt_requests,
            "proxy": {k: " ".join(p.command[3:]) for k, p in procs.items()},
            "prompt_cache": "defeated: each request's system prompt starts with its own tag",
            "order": "non-streamed arms, then streamed; direct, proxy --no-audit, proxy with audits",
        }
        return out
    finally:
        for p in procs.values():
            p.stop()
        server.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("leak")
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=100, help="requests before the growth is measured")
    p.add_argument("--tracemalloc", action="store_true", help="Python allocations after the warm-up, by line")
    p.add_argument(
        "--release",
        action="store_true",
        help="at every sample, also the RSS after releasing caches (SQLite shrink_memory, malloc_trim)",
    )
    p.add_argument(
        "--sqlite-cache-kb", type=int, default=None, help="bound the log's SQLite page cache (an experiment)"
    )
    p.add_argument(
        "--where",
        choices=["process", "thread"],
        default="thread",
        help="the proxy in its own process (as deployed; only its memory measured; arms with --arm) or in a "
        "thread of the benchmark (with the stub upstream and the client)",
    )
    p.add_argument(
        "--arm",
        action="append",
        default=None,
        metavar="NAME=ARGS",
        help="--where process: a proxy process with these proxy-child arguments (repeatable; the arms get "
        "the same requests in turn)",
    )
    p.add_argument("--every", type=int, default=None, help="sample every N requests (default n/100, >= 100)")
    p.add_argument(
        "--clients",
        type=int,
        default=1,
        help="--where process: concurrent clients (default 1: one at a time)",
    )
    c = sub.add_parser("proxy-child", help="(internal) the proxy process of leak --where process")
    c.add_argument("--upstream", required=True)
    c.add_argument("--db", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--tracemalloc", action="store_true")
    c.add_argument(
        "--cache-kb", type=int, default=None, help="the log's SQLite page cache (8192: as before issue 36)"
    )
    c.add_argument(
        "--arena-max", type=int, default=0, help="an experiment: glibc mallopt(M_ARENA_MAX) at start"
    )
    c.add_argument(
        "--trim-every", type=int, default=0, help="an experiment: malloc_trim(0) after every N appends"
    )
    c.add_argument("--no-gc-freeze", action="store_true", help="ProxySettings(gc_freeze=False)")
    for name in ("latency", "load"):
        q = sub.add_parser(name)
        q.add_argument("--threads", type=int, default=1, help="llama.cpp server threads")
        q.add_argument(
            "--server",
            choices=["lcp", "native"],
            default="lcp",
            help="the upstream: llama-cpp-python's server (lcp) or llama.cpp's C++ llama-server (native)",
        )
        q.add_argument(
            "--profile",
            default=None,
            help="endpoint profile folder (calibrated there on 10 verified items first when it has none)",
        )
        q.add_argument("--max-tokens", type=int, default=24)
        q.add_argument("--audit-queue", type=int, default=4)
        q.add_argument(
            "--max-seconds", type=float, default=900, help="bound per arm (load) / in all (latency)"
        )
        if name == "latency":
            q.add_argument("--n", type=int, default=30, help="rounds (one request per path each)")
            q.add_argument("--gap", choices=["audit", "none"], default="audit")
            q.add_argument(
                "--audit-server",
                choices=["upstream", "separate"],
                default="upstream",
                help="audit through the upstream itself, or a second server of the same model (--audit-endpoint)",
            )
        else:
            q.add_argument("--n", type=int, default=48, help="requests per arm")
            q.add_argument("--clients", type=int, default=4)
            q.add_argument("--timeout", type=float, default=600, help="client time-out per request (s)")
            q.add_argument("--audit-wait", type=float, default=None, help="the proxy's --audit-wait")
            q.add_argument(
                "--audit-drain", type=float, default=600, help="wait at most S s for audits after an arm"
            )
            q.add_argument(
                "--interrupt-requests",
                choices=["true", "false"],
                default="false",
                help="llama-cpp-python's --interrupt_requests (true by default there: a new request cuts the "
                "stream being generated short; false here so that concurrent streams complete)",
            )
    p2 = ap
    p2.add_argument("--out", default=None, help="result file (default benchmarks/results/proxy/<what>.json)")
    args = ap.parse_args(argv)
    if args.what == "proxy-child":
        return run_proxy_child(args)
    from mnemoscope.provenance import provenance

    load0 = _load()
    t0 = time.perf_counter()
    leak = run_leak_process if getattr(args, "where", None) == "process" else run_leak
    res = {"leak": leak, "latency": run_latency, "load": run_load}[args.what](args)
    rec = {
        "provenance": provenance(),
        "env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")},
        "machine_load": {
            "before": load0,
            "after": _load(),
            "note": "2 cores shared with other sessions' jobs",
        },
        "seconds": round(time.perf_counter() - t0, 1),
        **res,
    }
    out = Path(args.out) if args.out else OUT / f"{args.what}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rec, indent=2) + "\n")
    print(json.dumps({k: v for k, v in rec.items() if k not in ("provenance", "samples")}, indent=2)[:4000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
