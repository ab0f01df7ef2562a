"""What the audit proxy costs a client, what it survives, and whether it leaks (issue 25).

Three measurements, each written as JSON under ``benchmarks/results/proxy/`` with its provenance
(command, git commit, threads; the machine is shared: the load average is recorded before and
after):

* ``leak``: 1,000 requests of every kind (plain, 5xx, malformed JSON, cut stream, full stream)
  through the proxy to a small real HTTP server that misbehaves on purpose (the one of
  tests/test_proxy_faults.py); the proxy's open file descriptors, its upstream connections and
  its resident memory are sampled every 100 requests. No model is needed.
* ``latency``: streamed answers from a real llama.cpp server (the default model), time to first
  token and time to ``[DONE]`` as the client sees them, direct vs through the proxy with auditing
  off and on. Requests alternate between the three paths, one at a time; with auditing on, the
  next request waits until the previous audit is logged (``--gap audit``: the proxy's own cost)
  or not (``--gap none``: the audit's load on the same server included).
* ``load``: N concurrent clients (bounded) send M non-streamed requests; throughput and p50/p99
  latency direct vs proxy (audit off / on, bounded audit queue); how many audits were shed.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_proxy.py leak --n 1000
    OMP_NUM_THREADS=1 python benchmarks/bench_proxy.py latency --n 20 --threads 1
    OMP_NUM_THREADS=1 python benchmarks/bench_proxy.py load --clients 4 --n 48 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import threading
import time
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

    def __init__(self, upstream: str, db: Path, auditor: Any = None, **settings: Any):
        import uvicorn

        from mnemoscope.server.proxy import ProxySettings, create_proxy_app
        from mnemoscope.server.storage import open_store

        app = create_proxy_app(
            ProxySettings(upstream=upstream, **settings), auditor=auditor, store=open_store(db)
        )
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
    proxy = Proxy(f"http://127.0.0.1:{up_port}/v1", tmp / "audit.db", timeout=5.0)
    modes = [("ok", False), ("5xx", False), ("malformed", False), ("cut", True), ("ok", True)]
    samples = []
    t0 = time.perf_counter()
    outcomes: dict[str, int] = {}
    with httpx.Client(timeout=30) as c:
        for i in range(args.n + 1):
            if i % 100 == 0:
                srv.seen.clear()  # type: ignore[attr-defined]
                samples.append(
                    {
                        "requests": i,
                        "fds": _fds(),
                        "upstream_connections": _sockets_to(up_port),
                        "rss_mb": round(_rss_mb(), 1),
                    }
                )
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
    health = proxy.health()
    proxy.stop()
    srv.shutdown()
    first, warm, last = samples[0], samples[1] if len(samples) > 1 else samples[0], samples[-1]
    return {
        "what": "fds, upstream connections and RSS of the proxy over N mixed requests (ok, 5xx, malformed, cut stream, stream)",
        "n_requests": args.n,
        "wall_s": round(wall, 2),
        "samples": samples,
        "outcomes": outcomes,
        "proxy_counts": health,
        "delta_after_first_100": {
            "fds": last["fds"] - warm["fds"],
            "upstream_connections": last["upstream_connections"] - warm["upstream_connections"],
            "rss_mb": round(last["rss_mb"] - warm["rss_mb"], 1),
        },
        "delta_from_start": {
            "fds": last["fds"] - first["fds"],
            "rss_mb": round(last["rss_mb"] - first["rss_mb"], 1),
        },
    }


# -- the real llama.cpp server ----------------------------------------------------------------------


def _llama(threads: int) -> Any:
    sys.path.insert(0, str(ROOT / "tests"))
    from llama_servers import LlamaCppServer  # the tests' server launcher (python -m llama_cpp.server)
    from mnemoscope.models.loader import default_gguf_path

    server = LlamaCppServer(
        default_gguf_path(), n_threads=threads, log_path=Path("/tmp/bench_proxy_llama.log")
    )
    server.start(timeout=300)
    return server


def _auditor(server: Any, profile: str | None) -> Any:
    from mnemoscope.models.endpoint import EndpointClient, EndpointConfig
    from mnemoscope.pipelines.endpoint import EndpointAuditor, load_endpoint_profile

    client = EndpointClient(EndpointConfig(server.base_url, concurrency=1, timeout=600))
    if profile is None or not (Path(profile) / "profile.json").is_file():
        import tempfile

        from mnemoscope.data.records import Record
        from mnemoscope.pipelines.endpoint import EndpointCalibrationConfig, calibrate_endpoint_profile

        verified = ROOT / "benchmarks" / "results" / "verdict" / "verified.jsonl"
        items = [json.loads(x) for x in verified.read_text().splitlines() if x.strip()]
        picked = [it for it in items if it["label"] == 0][:5] + [it for it in items if it["label"] == 1][:5]
        recs = [
            Record(id=it["id"], context=it["context"], query=it["query"], label=it["label"]) for it in picked
        ]
        out = Path(profile) if profile else Path(tempfile.mkdtemp()) / "profile"
        prof = calibrate_endpoint_profile(
            client, recs, out, EndpointCalibrationConfig(chat_template="default"), progress=False
        )
    else:
        prof = load_endpoint_profile(profile)
    return EndpointAuditor(client, prof)


def _stream_once(base: str, max_tokens: int, tag: str = "") -> dict[str, Any]:
    """TTFT (first content delta) and time to [DONE] of one streamed chat completion. ``tag``
    starts the system prompt, so that no request reuses the server's prompt cache of another
    (the audit's own requests fill it): every path pays the same prompt evaluation."""
    import httpx

    msgs = (
        [{**MESSAGES[0], "content": f"[{tag}] {MESSAGES[0]['content']}"}, *MESSAGES[1:]] if tag else MESSAGES
    )
    body = {
        "model": "smollm2",
        "messages": msgs,
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": True,
    }
    t0 = time.perf_counter()
    ttft = None
    aid = None
    buf = b""
    with httpx.stream("POST", f"{base}/chat/completions", json=body, timeout=600) as r:
        aid = r.headers.get("x-mnemoscope-audit-id")
        for part in r.iter_raw():
            buf += part
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                data = event.strip().removeprefix(b"data:").strip()
                if data == b"[DONE]":
                    return {"ttft_s": ttft, "total_s": time.perf_counter() - t0, "audit_id": aid}
                if ttft is None and data.startswith(b"{"):
                    try:
                        delta = json.loads(data)["choices"][0].get("delta") or {}
                    except (ValueError, KeyError, IndexError):
                        continue
                    if delta.get("content"):  # the first token's text (not the role-only chunk)
                        ttft = time.perf_counter() - t0
    return {"ttft_s": ttft, "total_s": time.perf_counter() - t0, "audit_id": aid}


def _wait_logged(proxy: Proxy, aid: str | None, timeout: float = 900) -> dict[str, Any] | None:
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


def run_latency(args: argparse.Namespace) -> dict[str, Any]:
    import tempfile

    server = _llama(args.threads)
    try:
        auditor = _auditor(server, args.profile)
        tmp = Path(tempfile.mkdtemp())
        off = Proxy(server.base_url, tmp / "off.db", audit=False)
        on = Proxy(server.base_url, tmp / "on.db", auditor=auditor)
        paths = {
            "direct": server.base_url,
            "proxy_audit_off": f"{off.url}/v1",
            "proxy_audit_on": f"{on.url}/v1",
        }
        for base in paths.values():  # warm-up: the server's prompt cache, the pools
            _stream_once(base, args.max_tokens)
        _wait_logged(on, None)
        time.sleep(1)
        res: dict[str, list[dict[str, Any]]] = {k: [] for k in paths}
        audits = []
        names = list(paths)
        for i in range(args.n):
            for name in names[i % 3 :] + names[: i % 3]:  # each path first in turn
                r = _stream_once(paths[name], args.max_tokens, tag=f"{i}-{name}")
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
        out: dict[str, Any] = {"paths": {}}
        for name, rs in res.items():
            out["paths"][name] = {
                "ttft": _summ([r["ttft_s"] for r in rs if r["ttft_s"] is not None]),
                "total_to_done": _summ([r["total_s"] for r in rs]),
            }
        d = out["paths"]["direct"]
        for name in ("proxy_audit_off", "proxy_audit_on"):
            p = out["paths"][name]
            p["ttft_median_vs_direct"] = round(p["ttft"]["median_s"] / d["ttft"]["median_s"] - 1, 4)
            p["total_median_vs_direct"] = round(
                p["total_to_done"]["median_s"] / d["total_to_done"]["median_s"] - 1, 4
            )
        statuses: dict[str, int] = {}
        for a in audits:
            statuses[str(a["status"])] = statuses.get(str(a["status"]), 0) + 1
        lat = [float(a["latency_ms"]) for a in audits if a["latency_ms"] is not None]
        out["audits"] = {"statuses": statuses, "audit_ms": _summ([x / 1000 for x in lat])}
        out["settings"] = {
            "n_rounds": args.n,
            "prompt_cache": "defeated: each request's system prompt starts with its own tag; paths rotate",
            "max_tokens": args.max_tokens,
            "gap": args.gap,
            "server_threads": args.threads,
        }
        off.stop()
        on.stop()
        return out
    finally:
        server.stop()


def run_load(args: argparse.Namespace) -> dict[str, Any]:
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    server = _llama(args.threads)
    try:
        auditor = _auditor(server, args.profile)
        tmp = Path(tempfile.mkdtemp())
        off = Proxy(server.base_url, tmp / "off.db", audit=False)
        on = Proxy(server.base_url, tmp / "on.db", auditor=auditor, audit_queue=args.audit_queue)
        paths = {
            "direct": server.base_url,
            "proxy_audit_off": f"{off.url}/v1",
            "proxy_audit_on": f"{on.url}/v1",
        }
        body = {"model": "smollm2", "messages": MESSAGES, "temperature": 0, "max_tokens": args.max_tokens}
        out: dict[str, Any] = {"paths": {}}
        for name, base in paths.items():
            lat: list[float] = []
            statuses: dict[str, int] = {}
            errors = 0

            def one(_: int, base: str = base) -> tuple[float, str | None]:
                t0 = time.perf_counter()
                r = httpx.post(f"{base}/chat/completions", json=body, timeout=900)
                dt = time.perf_counter() - t0
                if r.status_code != 200:
                    return dt, f"HTTP {r.status_code}"
                m = r.json().get("mnemoscope")
                return dt, None if m is None else str(m.get("status"))

            t0 = time.perf_counter()
            with ThreadPoolExecutor(args.clients) as ex:
                for dt, st in ex.map(one, range(args.n)):
                    lat.append(dt)
                    if st is not None and st.startswith("HTTP"):
                        errors += 1
                    elif st is not None:
                        statuses[st] = statuses.get(st, 0) + 1
            wall = time.perf_counter() - t0
            out["paths"][name] = {
                "wall_s": round(wall, 2),
                "throughput_rps": round(args.n / wall, 3),
                "p50_s": round(_pct(lat, 50), 3),
                "p99_s": round(_pct(lat, 99), 3),
                "errors": errors,
                "audit_statuses": statuses,
            }
        h = on.health()
        out["paths"]["proxy_audit_on"]["health"] = h
        off.stop()
        on.stop()
        out["settings"] = {
            "clients": args.clients,
            "n_requests": args.n,
            "max_tokens": args.max_tokens,
            "audit_queue": args.audit_queue,
            "audit_workers": 1,
            "server_threads": args.threads,
        }
        return out
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("leak")
    p.add_argument("--n", type=int, default=1000)
    for name in ("latency", "load"):
        q = sub.add_parser(name)
        q.add_argument("--threads", type=int, default=1, help="llama.cpp server threads")
        q.add_argument(
            "--profile",
            default=None,
            help="endpoint profile folder (calibrated there on 10 verified items first when it has none)",
        )
        q.add_argument("--max-tokens", type=int, default=24)
        if name == "latency":
            q.add_argument("--n", type=int, default=20, help="rounds (one request per path each)")
            q.add_argument("--gap", choices=["audit", "none"], default="audit")
        else:
            q.add_argument("--n", type=int, default=48, help="requests per path")
            q.add_argument("--clients", type=int, default=4)
            q.add_argument("--audit-queue", type=int, default=4)
    p2 = ap
    p2.add_argument("--out", default=None, help="result file (default benchmarks/results/proxy/<what>.json)")
    args = ap.parse_args(argv)
    from mnemoscope.provenance import provenance

    load0 = _load()
    t0 = time.perf_counter()
    res = {"leak": run_leak, "latency": run_latency, "load": run_load}[args.what](args)
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
