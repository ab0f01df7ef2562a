"""Load test of the audit service over loopback HTTP (issue 26), bounded in count and time.

Starts ``--replicas`` real ``mnemoscope serve`` processes on one database (SQLite for one
replica, PostgreSQL for several), then for each concurrency level (default 1, 8, 32, 128)
runs closed-loop clients (one thread + one ``httpx.Client`` each; client ``k`` talks to
replica ``k % replicas``, as a round-robin load balancer would) until ``--requests`` audits
were sent or ``--seconds`` passed. Reports per level: audits/s, p50/p99 latency, error rate
(non-200 answers and connection errors, by status; a client honours a 503's Retry-After, at most
1 s, before its next request), and over the whole run the resident
memory (RSS) of every server process sampled each second, and the log's size at the end; it
ends with ``log verify`` of the database.

CPU: the CPU time (user + system, ``/proc/PID/stat``) each replica, each PostgreSQL backend
and the load generator used during each level, also per audit answered: what one audit costs
each process, whatever else the machine is running.

Memory: the resident set (RSS, ``/proc/PID/status``) of every process taking part is sampled
each second: each server replica (and any child it starts), this load generator, and on
PostgreSQL the database backends serving the replicas (found by ``application_name``, which
the script sets on the replicas' URL). Machine state per level: 1/5/15-min load averages and
the number of runnable tasks (``/proc/loadavg``); the busiest other processes are listed at
the start and the end of the run (``ps``), so a figure can be read with what else was running.

``--model tiny``: a tiny random llama saved to disk with a profile calibrated for it (the
test suite's), so the service itself (HTTP, queue, batching, storage) is measured;
``--model default``: the embedded default model (throughput is model-bound).

    OMP_NUM_THREADS=1 python benchmarks/bench_load.py --model tiny --tag tiny-sqlite
    OMP_NUM_THREADS=1 python benchmarks/bench_load.py --model tiny --db "$MNEMOSCOPE_TEST_PG_URL" --replicas 2
    OMP_NUM_THREADS=1 python benchmarks/bench_load.py --model default --db "$MNEMOSCOPE_TEST_PG_URL" --replicas 2

The machine is shared: 1-minute load averages are recorded per level; read figures with them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from mnemoscope.provenance import provenance

ROOT = Path(__file__).resolve().parents[1]
API_KEY = "bench-load-key"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(
    model: str,
    profile: str | None,
    db: str,
    log: Path,
    extra: list[str],
    ready_s: float,
    request_timeout_s: float = 600,
) -> tuple[Any, str]:
    port = free_port()
    env = {
        **os.environ,
        "MNEMOSCOPE_API_KEYS": API_KEY,
        "PYTHONUNBUFFERED": "1",
        "MNEMOSCOPE_REQUEST_TIMEOUT_S": str(request_timeout_s),
    }
    cmd = [sys.executable, "-m", "mnemoscope", "--quiet", "serve", "--model", model, "--db", db]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--threads", "1", *extra]
    if profile:
        cmd += ["--profile", profile]
    f = log.open("ab")
    proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + ready_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {log.read_text()[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                return proc, url
        time.sleep(0.3)
    proc.kill()
    raise RuntimeError(f"server not ready after {ready_s} s: {log.read_text()[-2000:]}")


def rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def machine() -> dict[str, Any]:
    """Load averages and runnable/total tasks from /proc/loadavg."""
    parts = Path("/proc/loadavg").read_text().split()
    running, total = parts[3].split("/")
    return {
        "load": [float(x) for x in parts[:3]],
        "runnable_tasks": int(running),
        "tasks": int(total),
    }


def _cpu_ticks() -> dict[int, tuple[int, str]]:
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        out[int(d.name)] = (
            int(fields[11]) + int(fields[12]),
            cmd or stat[stat.find("(") : stat.rfind(")") + 1],
        )
    return out


def cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) a process has used so far."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    f = stat[stat.rfind(")") + 2 :].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def busiest(n: int = 12, window_s: float = 1.0) -> list[str]:
    """The processes using >= 5% of a core over ``window_s`` (utime + stime from /proc)."""
    hz = os.sysconf("SC_CLK_TCK")
    a = _cpu_ticks()
    time.sleep(window_s)
    b = _cpu_ticks()
    use = sorted(
        ((100.0 * (t - a[pid][0]) / hz / window_s, cmd) for pid, (t, cmd) in b.items() if pid in a),
        reverse=True,
    )
    return [f"{pct:.0f}% {cmd[:110]}" for pct, cmd in use[:n] if pct >= 5.0]


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, round(q / 100 * (len(s) - 1)))]


def run_level(urls: list[str], conc: int, n_max: int, seconds: float) -> dict[str, Any]:
    before = machine()
    lat: list[float] = []
    status: dict[str, int] = {}
    sent = 0
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds

    def client(k: int) -> None:
        nonlocal sent
        with httpx.Client(
            base_url=urls[k % len(urls)], headers={"Authorization": f"Bearer {API_KEY}"}, timeout=600
        ) as c:
            i = 0
            while time.perf_counter() < stop_at:
                with lock:
                    if sent >= n_max:
                        return
                    sent += 1
                i += 1
                body = {
                    "context": f"The town of Zor{k}x{i} lies on the river Ka{i % 7}.",
                    "query": f"Where is Zor{k}x{i}?",
                }
                t0 = time.perf_counter()
                retry_after = 0.0
                try:
                    r = c.post("/v1/audit", json=body)
                    code = str(r.status_code)
                    if r.status_code == 503:
                        with contextlib.suppress(ValueError):
                            retry_after = float(r.headers.get("retry-after", "1"))
                except httpx.HTTPError as e:
                    code = type(e).__name__
                dt = time.perf_counter() - t0
                with lock:
                    status[code] = status.get(code, 0) + 1
                    if code == "200":
                        lat.append(dt)
                if retry_after:  # a polite client: honour Retry-After, at most 1 s
                    time.sleep(min(retry_after, 1.0))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    n = sum(status.values())
    ok = status.get("200", 0)
    return {
        "concurrency": conc,
        "n": n,
        "ok": ok,
        "wall_s": round(wall, 2),
        "audits_per_s": round(ok / wall, 3) if wall else None,
        "p50_ms": None if not lat else round(pct(lat, 50) * 1e3, 1),  # type: ignore[operator]
        "p99_ms": None if not lat else round(pct(lat, 99) * 1e3, 1),  # type: ignore[operator]
        "mean_ms": None if not lat else round(statistics.fmean(lat) * 1e3, 1),
        "error_rate": round(1 - ok / n, 4) if n else None,
        "status": status,
        "load1": round(os.getloadavg()[0], 2),
        "machine_before": before,
        "machine_after": machine(),
    }


def log_size(db: str) -> dict[str, Any]:
    if db.startswith(("postgresql://", "postgres://")):
        import psycopg

        with psycopg.connect(db, autocommit=True) as con:
            row = con.execute(
                "SELECT pg_total_relation_size('audits'), pg_total_relation_size('nodes'), "
                "pg_total_relation_size('checkpoints'), (SELECT tree_size FROM log_state)"
            ).fetchone()
        return {
            "audits_bytes": row[0],
            "nodes_bytes": row[1],
            "checkpoints_bytes": row[2],
            "tree_size": row[3],
        }
    files = [Path(db + s) for s in ("", "-wal") if Path(db + s).exists()]
    from mnemoscope.server.storage import open_store

    st = open_store(db, readonly=True)
    n = st.counts()["n"]
    st.close()
    return {"file_bytes": sum(p.stat().st_size for p in files), "tree_size": n}


def pg_backends(db: str, app: str) -> list[int]:
    import psycopg

    with psycopg.connect(db, autocommit=True) as con:
        rows = con.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND pid <> pg_backend_pid()",
            (app,),
        ).fetchall()
    return sorted(int(r[0]) for r in rows)


def sample_memory(
    servers: list[tuple[Any, str]],
    db: str,
    app: str | None,
    out: list[dict[str, Any]],
    stop: threading.Event,
) -> None:
    """Every second: RSS of each replica (+ children), of this load generator, and of the
    PostgreSQL backends serving the replicas (re-listed every 10 s: a reconnect changes them)."""
    t0 = time.time()
    backends: list[int] = []
    k = 0
    while not stop.is_set():
        if app is not None and k % 10 == 0:
            with contextlib.suppress(Exception):
                backends = pg_backends(db, app)
        procs: dict[str, int | None] = {}
        for i, (p, _) in enumerate(servers):
            kids = children(p.pid)
            procs[f"server{i}"] = rss_kb(p.pid)
            for c in kids:
                procs[f"server{i}-child{c}"] = rss_kb(c)
        procs["loadgen"] = rss_kb(os.getpid())
        for b in backends:
            procs[f"pg-backend{b}"] = rss_kb(b)
        out.append({"t": round(time.time() - t0, 1), "rss_kb": procs})
        k += 1
        stop.wait(1.0)


def memory_summary(samples: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per process: first, max, last RSS (KB) and the growth over the second half of its samples
    (last minus the median of the samples at the midpoint: flat memory is ~0)."""
    series: dict[str, list[int]] = {}
    for s in samples:
        for name, v in s["rss_kb"].items():
            if v:
                series.setdefault(name, []).append(int(v))
    out = {}
    for name, xs in series.items():
        mid = xs[len(xs) // 2 : len(xs) // 2 + 5]
        out[name] = {
            "n_samples": len(xs),
            "first": xs[0],
            "max": max(xs),
            "last": xs[-1],
            "growth_second_half_kb": xs[-1] - int(statistics.median(mid)),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["tiny", "default"], default="tiny")
    ap.add_argument(
        "--db", default=None, help="postgresql:// URL (a fresh schema is made in it) or nothing for SQLite"
    )
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--levels", default="1,8,32,128")
    ap.add_argument("--requests", type=int, default=400, help="audits per level at most")
    ap.add_argument("--seconds", type=float, default=60, help="seconds per level at most")
    ap.add_argument("--ready-s", type=float, default=600)
    ap.add_argument(
        "--request-timeout-s",
        type=float,
        default=600,
        help="the servers' request timeout (504 after it): bounds how long a level drains its queue",
    )
    ap.add_argument("--tag", default=None)
    ap.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "results" / "server")
    ap.add_argument("--work", type=Path, default=Path("/tmp/mnemoscope-bench-load"))
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    model, profile = "default", None
    if args.model == "tiny":
        sys.path.insert(0, str(ROOT / "tests"))
        from server_helpers import build_tiny_service  # the test suite's tiny model + profile

        m, p = build_tiny_service(args.work / "tiny")
        model, profile = str(m), str(p)
    schema = None
    if args.db:
        import psycopg

        schema = f"load_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(args.db, autocommit=True) as con:
            con.execute(f"CREATE SCHEMA {schema}")
        sep = "&" if "?" in args.db else "?"
        # the application name lets the memory sampler find the replicas' PostgreSQL backends
        db = f"{args.db}{sep}options=-csearch_path%3D{schema}&application_name={schema}"
        from mnemoscope.server.storage import open_store

        open_store(db).close()  # create the schema once, before the replicas start
    else:
        if args.replicas != 1:
            raise SystemExit(
                "several replicas need PostgreSQL (--db postgresql://...): SQLite has one writer"
            )
        db = str(args.work / f"load-{uuid.uuid4().hex[:8]}.db")
    extra = ["--max-wait-ms", "5"]
    servers = []
    rss: list[dict[str, Any]] = []
    stop = threading.Event()
    run_started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    prov = provenance()  # at the start: the commit the replicas run
    busy_start = busiest()
    try:
        for i in range(args.replicas):
            servers.append(
                start(
                    model,
                    profile,
                    db,
                    args.work / f"server{i}.log",
                    extra,
                    args.ready_s,
                    args.request_timeout_s,
                )
            )
        sampler = threading.Thread(target=sample_memory, args=(servers, db, schema, rss, stop), daemon=True)
        sampler.start()
        urls = [u for _, u in servers]
        run_level(urls, 1, 4, 60)  # warm-up (first audits load lazy parts)
        levels = []
        for conc in (int(x) for x in args.levels.split(",")):
            procs = {f"server{i}": p.pid for i, (p, _) in enumerate(servers)}
            if schema is not None:
                with contextlib.suppress(Exception):
                    procs.update({f"pg-backend{b}": b for b in pg_backends(db, schema)})
            procs["loadgen"] = os.getpid()
            cpu0 = {k: cpu_s(v) for k, v in procs.items()}
            res = run_level(urls, conc, max(args.requests, conc), args.seconds)
            cpu1 = {k: cpu_s(v) for k, v in procs.items()}
            spent = {
                k: round(cpu1[k] - cpu0[k], 2)  # type: ignore[operator]
                for k in procs
                if cpu0[k] is not None and cpu1[k] is not None
            }
            res["cpu_s"] = spent  # CPU each process used during the level
            res["cpu_ms_per_ok_audit"] = {
                k: round(1e3 * v / res["ok"], 2) for k, v in spent.items() if res["ok"]
            }
            res["rss_kb_now"] = [rss_kb(p.pid) for p, _ in servers]
            res["busiest_after"] = busiest()  # what else ran (the replicas themselves included)
            levels.append(res)
            print(json.dumps(res), flush=True)
    finally:
        stop.set()
        for p, _ in servers:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p, _ in servers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(120)
    busy_end = busiest()
    from mnemoscope.server.storage import open_store

    st = open_store(db, readonly=True)
    t0 = time.perf_counter()
    rep = st.verify()
    verify_s = time.perf_counter() - t0
    st.close()
    out = {
        "model": args.model,
        "backend": "postgresql" if args.db else "sqlite",
        "replicas": args.replicas,
        "threads_per_server": 1,
        "bounds": {
            "requests_per_level": args.requests,
            "seconds_per_level": args.seconds,
            "request_timeout_s": args.request_timeout_s,
        },
        "note": "loopback, closed-loop clients, shared 2-core machine (load per level)",
        "provenance": prov,
        "started_utc": run_started,
        "ended_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "busiest_processes": {"start": busy_start, "end": busy_end},
        "levels": levels,
        "rss_kb": {"per_process": memory_summary(rss), "samples": rss},
        "log": log_size(db),
        "verify": {"ok": rep.ok, "n_entries": rep.n_entries, "s": round(verify_s, 2), "problem": rep.problem},
    }
    if schema and args.db:
        import psycopg

        with psycopg.connect(args.db, autocommit=True) as con:
            con.execute(f"DROP SCHEMA {schema} CASCADE")
    tag = args.tag or f"{args.model}-{out['backend']}-r{args.replicas}"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"load-log-{tag}.json").write_text(json.dumps(out, indent=1) + "\n")
    lines = [
        f"# Load test `{tag}`: model {args.model}, {out['backend']}, {args.replicas} replica(s), 1 torch thread each",
        "",
        f"Command: `{out['provenance']['command']}` at {out['provenance']['git_commit']}, "
        f"{out['started_utc']} - {out['ended_utc']}; shared 2-core machine. Each level: at most "
        f"{args.requests} audits or {args.seconds:g} s (then in-flight requests finish; server request "
        f"timeout {args.request_timeout_s:g} s).",
        "",
        "| clients | sent | ok | audits/s | p50 ms | p99 ms | error rate | statuses | load 1/5/15 before -> after "
        "| runnable tasks before/after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in levels:
        mb, ma = r["machine_before"], r["machine_after"]
        lines.append(
            f"| {r['concurrency']} | {r['n']} | {r['ok']} | {r['audits_per_s']} | {r['p50_ms']} | {r['p99_ms']} | "
            f"{r['error_rate']} | {r['status']} | {mb['load']} -> {ma['load']} | "
            f"{mb['runnable_tasks']}/{ma['runnable_tasks']} |"
        )
    lines += [
        "",
        "CPU per answered audit (ms; user + system, each process, during the level):",
        "",
        "| clients | "
        + " | ".join(f"{k}" for k in ("replicas (sum)", "PostgreSQL backends (sum)", "load generator"))
        + " |",
        "|---|---|---|---|",
    ]
    for r in levels:
        per = r.get("cpu_ms_per_ok_audit", {})
        srv = sum(v for k, v in per.items() if k.startswith("server"))
        pgb = sum(v for k, v in per.items() if k.startswith("pg-backend"))
        lines.append(f"| {r['concurrency']} | {srv:.1f} | {pgb:.1f} | {per.get('loadgen', 0):.1f} |")
    lines += [
        "",
        "| process | samples | RSS first MB | max MB | last MB | growth over the 2nd half MB |",
        "|---|---|---|---|---|---|",
    ]
    for name, m in out["rss_kb"]["per_process"].items():
        lines.append(
            f"| {name} | {m['n_samples']} | {m['first'] / 1024:.1f} | {m['max'] / 1024:.1f} | "
            f"{m['last'] / 1024:.1f} | {m['growth_second_half_kb'] / 1024:+.1f} |"
        )
    lines += ["", f"Log at the end: {out['log']}; verify: {out['verify']}", ""]
    lines += ["Busiest processes at the start (top, %CPU command):", ""]
    lines += [f"    {x}" for x in busy_start] + [""]
    lines += ["At the end:", ""] + [f"    {x}" for x in busy_end] + [""]
    (args.out_dir / f"load-log-{tag}.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
