"""Load test of the audit service over loopback HTTP (issue 26), bounded in count and time.

Starts ``--replicas`` real ``mnemoscope serve`` processes on one database (SQLite for one
replica, PostgreSQL for several), then for each concurrency level (default 1, 8, 32, 128)
runs closed-loop clients (one thread + one ``httpx.Client`` each; client ``k`` talks to
replica ``k % replicas``, as a round-robin load balancer would) until ``--requests`` audits
were sent or ``--seconds`` passed. Reports per level: audits/s, p50/p99 latency, error rate
(non-200 answers and connection errors, by status), and over the whole run the resident
memory (RSS) of every server process sampled each second, and the log's size at the end; it
ends with ``log verify`` of the database.

``--model tiny``: a tiny random llama saved to disk with a profile calibrated for it (the
test suite's), so the service itself (HTTP, queue, batching, storage) is measured;
``--model default``: the embedded default model (throughput is model-bound).

    OMP_NUM_THREADS=1 python benchmarks/bench_load.py --model tiny --tag tiny-sqlite
    OMP_NUM_THREADS=1 python benchmarks/bench_load.py --model tiny --db "$MNEMOSCOPE_TEST_PG_URL" --replicas 2
    OMP_NUM_THREADS=1 python benchmarks/bench_load.py --model default --levels 1,8,32 --requests 64

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
    model: str, profile: str | None, db: str, log: Path, extra: list[str], ready_s: float
) -> tuple[Any, str]:
    port = free_port()
    env = {
        **os.environ,
        "MNEMOSCOPE_API_KEYS": API_KEY,
        "PYTHONUNBUFFERED": "1",
        "MNEMOSCOPE_REQUEST_TIMEOUT_S": "600",
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


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, round(q / 100 * (len(s) - 1)))]


def run_level(urls: list[str], conc: int, n_max: int, seconds: float) -> dict[str, Any]:
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
                try:
                    r = c.post("/v1/audit", json=body)
                    code = str(r.status_code)
                except httpx.HTTPError as e:
                    code = type(e).__name__
                dt = time.perf_counter() - t0
                with lock:
                    status[code] = status.get(code, 0) + 1
                    if code == "200":
                        lat.append(dt)

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
        db = f"{args.db}{sep}options=-csearch_path%3D{schema}"
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
    try:
        for i in range(args.replicas):
            servers.append(start(model, profile, db, args.work / f"server{i}.log", extra, args.ready_s))

        def sample() -> None:
            t0 = time.time()
            while not stop.is_set():
                rss.append({"t": round(time.time() - t0, 1), "rss_kb": [rss_kb(p.pid) for p, _ in servers]})
                stop.wait(1.0)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        urls = [u for _, u in servers]
        run_level(urls, 1, 4, 60)  # warm-up (first audits load lazy parts)
        levels = []
        for conc in (int(x) for x in args.levels.split(",")):
            res = run_level(urls, conc, max(args.requests, conc), args.seconds)
            res["rss_kb_now"] = [rss_kb(p.pid) for p, _ in servers]
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
    from mnemoscope.server.storage import open_store

    st = open_store(db, readonly=True)
    t0 = time.perf_counter()
    rep = st.verify()
    verify_s = time.perf_counter() - t0
    st.close()
    per_proc = [[r["rss_kb"][i] for r in rss if r["rss_kb"][i]] for i in range(len(servers))]
    out = {
        "model": args.model,
        "backend": "postgresql" if args.db else "sqlite",
        "replicas": args.replicas,
        "threads_per_server": 1,
        "note": "loopback, closed-loop clients, shared 2-core machine (load1 per level)",
        "provenance": provenance(),
        "levels": levels,
        "rss_kb": {
            "per_process": [
                {
                    "first": xs[0] if xs else None,
                    "max": max(xs) if xs else None,
                    "last": xs[-1] if xs else None,
                }
                for xs in per_proc
            ],
            "samples": rss,
        },
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
        f"Command: `{out['provenance']['command']}` at {out['provenance']['git_commit']}; shared 2-core machine.",
        "",
        "| clients | sent | ok | audits/s | p50 ms | p99 ms | error rate | statuses | load1 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in levels:
        lines.append(
            f"| {r['concurrency']} | {r['n']} | {r['ok']} | {r['audits_per_s']} | {r['p50_ms']} | {r['p99_ms']} | "
            f"{r['error_rate']} | {r['status']} | {r['load1']} |"
        )
    lines += ["", f"RSS per server (KB, first/max/last sample): {out['rss_kb']['per_process']}", ""]
    lines += [f"Log at the end: {out['log']}; verify: {out['verify']}", ""]
    (args.out_dir / f"load-log-{tag}.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
