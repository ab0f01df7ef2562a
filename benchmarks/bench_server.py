"""Audit server under load on loopback, dynamic batching ON vs OFF, measured in one run.

In one run on this machine:

1. calibrates an audit profile for the embedded default model once (cached in
   ``benchmarks/results/server/cache/profile``, git-ignored; reused when present);
2. in this process, before any server starts: a bare forward pass of the default model on a
   typical audit prompt (the profile's prompt for a median-length request, no hooks, no
   hidden states; median of several) and a bare greedy generation of exactly T tokens
   (``model.generate``, ``min_new_tokens = T``); plus one in-process ``Auditor.audit`` of
   one request, so the HTTP/queue/storage part of the server latency can be told apart;
3. starts ``mnemoscope serve`` (subprocess, ``--threads`` torch threads, a fresh SQLite log)
   with batching ON (``--max-batch-size 8 --max-wait-ms 20``) and OFF
   (``--max-batch-size 1 --max-wait-ms 0``), and for each runs closed-loop clients at
   concurrency 1, 4 and 16 (threads, one ``httpx.Client`` each), each level sending a bounded
   number of audits (``POST /v1/audit``, ``options.max_new_tokens = T``) built from varied
   (context, query) pairs of the shipped context-reliance set; the same request sequence
   is sent to both servers;
4. reports per (batching, concurrency): n, errors, p50/p95/p99 latency (client-side, wall
   clock per request), throughput, mean batch size (from ``/metrics`` ``mnemoscope_batch_size``
   deltas, cross-checked with ``/v1/stats`` queue.batches), the batching gain (throughput
   ON / OFF) per level, and p50 latency as a ratio to the bare forward and to the bare
   generation;
5. writes ``load.json`` and ``load.md`` to ``benchmarks/results/server/`` and prints the table.

The bench servers get ``MNEMOSCOPE_REQUEST_TIMEOUT_S=900`` (default 120 s) so that queueing on a
slow shared machine shows as latency, not as 504s (errors are still counted).

The machine is shared: the 1/5/15-min load averages (``os.getloadavg``) are recorded before
and after every phase; read the figures with them.

Usage:  python benchmarks/bench_server.py [--quick] [-T 16] [--threads 2]
        [--requests 1:12,4:16,16:32] [--out-dir benchmarks/results/server] [--tag NAME]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gc
import json
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
API_KEY = "bench-server-key"
REQUEST_TIMEOUT_S = 900
MODES = {
    "on": ["--max-batch-size", "8", "--max-wait-ms", "20"],
    "off": ["--max-batch-size", "1", "--max-wait-ms", "0"],
}


def _load() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _phase(log: dict[str, Any], name: str) -> dict[str, Any]:
    ph = {"phase": name, "start_utc": _now(), "loadavg_before": _load(), "t0": time.perf_counter()}
    log.setdefault("phases", []).append(ph)
    return ph


def _end(ph: dict[str, Any]) -> None:
    ph["seconds"] = round(time.perf_counter() - ph.pop("t0"), 2)
    ph["loadavg_after"] = _load()
    print(
        f"  [{ph['phase']}] {ph['seconds']:.1f} s, load avg {ph['loadavg_before']} -> {ph['loadavg_after']}",
        flush=True,
    )


# -- 1. profile ---------------------------------------------------------------------------------


def ensure_profile(prof: Path, max_records: int, T: int, threads: int) -> dict[str, Any]:
    meta = prof.parent / "calibrate.json"
    if (prof / "profile.json").is_file():
        return {"cached": True, "path": str(prof), **(json.loads(meta.read_text()) if meta.is_file() else {})}
    prof.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "-m", "mnemoscope", "calibrate", "--model", "default", "--out", str(prof),
        "--max-records", str(max_records), "-T", str(T),
    ]  # fmt: skip
    print("calibrating:", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "TRANSFORMERS_VERBOSITY": "error"}
    subprocess.run(cmd, check=True, env=env)
    info = {"calibrate_seconds": round(time.perf_counter() - t0, 1), "calibrate_cmd": cmd[2:]}
    info["calibrated_utc"] = _now()
    meta.write_text(json.dumps(info, indent=1) + "\n")
    return {"cached": False, "path": str(prof), **info}


# -- 2. bare references -------------------------------------------------------------------------


def pick_requests(n: int) -> list[dict[str, str]]:
    """Varied (context, query) pairs: a stride through the 450 shipped records (all three kinds)."""
    from mnemoscope.bench.reliance import load_reliance

    recs = load_reliance()
    order = [recs[(i * 37) % len(recs)] for i in range(len(recs))]  # 37 is coprime with 450
    return [{"id": r["id"], "context": r["context"], "query": r["query"]} for r in order[:n]]


def bare_reference(
    prof: Path, reqs: list[dict[str, str]], T: int, threads: int, repeats: int
) -> dict[str, Any]:
    import torch

    from mnemoscope.audit.auditor import Auditor, AuditRequest
    from mnemoscope.audit.profile import load_profile
    from mnemoscope.models import load_model
    from mnemoscope.trace import Tracer, prepare_pair
    from mnemoscope.trace.pair import PairItem

    torch.set_num_threads(threads)
    lm = load_model("default")
    profile = load_profile(prof, model=lm.info)
    tracer = Tracer(lm, batch_size=1)
    cfg = profile.pair_config(T)
    lens = []
    for r in reqs:
        p = prepare_pair(tracer, PairItem(r["id"], r["context"], r["query"]), cfg)
        lens.append((len(p.ids_with), r, p))
    lens.sort(key=lambda x: x[0])
    n_tok, typical, prep = lens[len(lens) // 2]
    ids = torch.tensor([prep.ids_with], dtype=torch.long)
    mask = torch.ones_like(ids)
    pad = tracer.pad_id

    def forward() -> None:
        with torch.no_grad():
            lm.model(input_ids=ids, attention_mask=mask)

    def generate() -> int:
        with torch.no_grad():
            out = lm.model.generate(
                input_ids=ids, attention_mask=mask, max_new_tokens=T, min_new_tokens=T,
                do_sample=False, num_beams=1, pad_token_id=pad,
            )  # fmt: skip
        return int(out.shape[1] - ids.shape[1])

    engine = Auditor(lm, profile, batch_size=1)
    areq = AuditRequest(typical["context"], typical["query"], max_new_tokens=T)

    def audit() -> None:
        (res,) = engine.audit([areq])
        assert not hasattr(res, "status"), res

    forward(), generate(), audit()  # warm-up
    times: dict[str, list[float]] = {"bare_forward": [], "bare_generate_T": [], "engine_audit_1": []}
    n_gen = 0
    for i in range(repeats):  # interleaved so load drift hits all three alike
        t0 = time.perf_counter()
        forward()
        times["bare_forward"].append(time.perf_counter() - t0)
        if i % 2 == 0 or repeats < 4:  # generation and audit are ~T times dearer: half as many
            t0 = time.perf_counter()
            n_gen = generate()
            times["bare_generate_T"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            audit()
            times["engine_audit_1"].append(time.perf_counter() - t0)
    # the same forward with 1 torch thread: on an oversubscribed machine 2 threads can be much
    # slower than 1 (OpenMP workers wait on each other); measured here so it shows in the results
    torch.set_num_threads(1)
    forward()
    times["bare_forward_1_thread"] = []
    for _ in range(max(3, repeats // 2)):
        t0 = time.perf_counter()
        forward()
        times["bare_forward_1_thread"].append(time.perf_counter() - t0)
    torch.set_num_threads(threads)
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {
        "prompt_tokens": n_tok,
        "prompt_tokens_range_of_requests": [lens[0][0], lens[-1][0]],
        "typical_request_id": typical["id"],
        "generated_tokens": n_gen,
        "torch_threads": torch.get_num_threads(),
        "n": {k: len(v) for k, v in times.items()},
        "median_seconds": {k: round(v, 4) for k, v in med.items()},
        "engine_audit_vs_bare_forward": round(med["engine_audit_1"] / med["bare_forward"], 2),
        "engine_audit_vs_bare_generate": round(med["engine_audit_1"] / med["bare_generate_T"], 2),
        "note": "bare forward: one model(**inputs) on the profile-rendered prompt (with context) of the "
        "median-length request, no hooks; bare generate: greedy model.generate of exactly T tokens "
        "(min_new_tokens=T); engine_audit_1: Auditor.audit of that one request in-process (generation "
        "+ both teacher-forced paths + scoring, no HTTP, no storage)",
    }
    return out  # the model goes with this frame (gc.collect() in the caller)


# -- 3. servers and clients ---------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, prof: Path, db: Path, logf: Path, threads: int, extra: list[str]):
        import httpx

        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "MNEMOSCOPE_API_KEYS": API_KEY, "PYTHONUNBUFFERED": "1"}
        env["TRANSFORMERS_VERBOSITY"] = "error"
        # the default 120 s request timeout turns queueing on this shared 2-core box into 504s;
        # we want the latency of every audit, so the bench servers wait longer (stated in the results)
        env["MNEMOSCOPE_REQUEST_TIMEOUT_S"] = str(REQUEST_TIMEOUT_S)
        self.cmd = [
            sys.executable, "-m", "mnemoscope", "--quiet", "serve", "--model", "default",
            "--profile", str(prof), "--db", str(db), "--host", "127.0.0.1", "--port", str(self.port),
            "--threads", str(threads), "--queue-size", "64", *extra,
        ]  # fmt: skip
        self.log = logf
        t0 = time.perf_counter()
        self._f = logf.open("ab")
        self.proc = subprocess.Popen(self.cmd, stdout=self._f, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 300
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {logf.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/ready", timeout=2).status_code == 200:
                    self.startup_s = time.perf_counter() - t0
                    return
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"server not ready after 300 s: {logf.read_text()[-3000:]}")

    def client(self) -> Any:
        import httpx

        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=600)

    def snapshot(self) -> dict[str, Any]:
        with self.client() as c:
            st = c.get("/v1/stats").json()
            met = c.get("/metrics").text
        m = {}
        for key in ("mnemoscope_batch_size_sum", "mnemoscope_batch_size_count", "mnemoscope_audits_total"):
            hit = re.search(rf"^{key} ([0-9.e+-]+)$", met, re.M)
            m[key] = float(hit.group(1)) if hit else None
        rej = sum(
            float(v) for v in re.findall(r"^mnemoscope_rejected_total\{[^}]*\} ([0-9.e+-]+)$", met, re.M)
        )
        return {
            "batches": st["queue"]["batches"],
            "n_audits": st["n_audits"],
            "batch_items": m["mnemoscope_batch_size_sum"],
            "batch_count": m["mnemoscope_batch_size_count"],
            "rejected": rej,
        }

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._f.close()
        return self.proc.returncode


def run_level(srv: Server, payloads: list[dict[str, Any]], concurrency: int) -> dict[str, Any]:
    """Closed loop: ``concurrency`` threads, each with its own client, take the next payload
    until all are sent; returns per-request latencies and outcomes."""
    lock = threading.Lock()
    nxt = iter(range(len(payloads)))
    lat: list[float] = [float("nan")] * len(payloads)
    status: list[int | str] = [0] * len(payloads)
    server_ms: list[float | None] = [None] * len(payloads)
    steps: list[int | None] = [None] * len(payloads)
    flags: list[bool | None] = [None] * len(payloads)

    def worker() -> None:
        with srv.client() as c:
            while True:
                with lock:
                    i = next(nxt, None)
                if i is None:
                    return
                t0 = time.perf_counter()
                try:
                    r = c.post("/v1/audit", json=payloads[i])
                    lat[i] = time.perf_counter() - t0
                    status[i] = r.status_code
                    if r.status_code == 200:
                        body = r.json()
                        server_ms[i] = body.get("latency_ms")
                        steps[i] = body.get("n_steps")
                        flags[i] = body.get("anomaly_flag")
                    else:
                        status[i] = f"{r.status_code}: {r.text[:200]}"
                except Exception as e:  # a transport error is an error of this request
                    lat[i] = time.perf_counter() - t0
                    status[i] = f"{type(e).__name__}: {e}"

    before = srv.snapshot()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    after = srv.snapshot()
    ok = [i for i, s in enumerate(status) if s == 200]
    errors = [s for s in status if s != 200]
    d_items = (after["batch_items"] or 0) - (before["batch_items"] or 0)
    d_count = (after["batch_count"] or 0) - (before["batch_count"] or 0)
    d_batches = after["batches"] - before["batches"]
    d_audits = after["n_audits"] - before["n_audits"]
    import numpy as np

    a = np.asarray([lat[i] for i in ok]) if ok else np.asarray([np.nan])
    srv_ms = [server_ms[i] for i in ok if server_ms[i] is not None]
    return {
        "concurrency": concurrency,
        "n": len(payloads),
        "ok": len(ok),
        "errors": len(errors),
        "error_samples": errors[:3],
        "wall_seconds": round(wall, 3),
        "throughput_rps": round(len(ok) / wall, 4),
        "latency_s": {
            "p50": round(float(np.percentile(a, 50)), 4),
            "p95": round(float(np.percentile(a, 95)), 4),
            "p99": round(float(np.percentile(a, 99)), 4),
            "mean": round(float(a.mean()), 4),
            "max": round(float(a.max()), 4),
        },
        "server_latency_ms_p50": round(statistics.median(srv_ms), 1) if srv_ms else None,
        "mean_batch_size_metrics": round(d_items / d_count, 3) if d_count else None,
        "mean_batch_size_stats": round(d_audits / d_batches, 3) if d_batches else None,
        "batches": d_batches,
        "rejected_delta": after["rejected"] - before["rejected"],
        "mean_generated_tokens": round(statistics.mean([s for s in steps if s is not None]), 2)
        if any(s is not None for s in steps)
        else None,
        "anomaly_rate": round(sum(1 for i in ok if flags[i]) / len(ok), 3) if ok else None,
    }


# -- 4./5. report -------------------------------------------------------------------------------


def table(res: dict[str, Any]) -> str:
    bare = res["bare"]["median_seconds"]
    fwd, gen = bare["bare_forward"], bare["bare_generate_T"]
    lines = [
        f"T = {res['config']['T']} new tokens per audit; server --threads {res['config']['threads']}; "
        f"bare forward {fwd * 1000:.0f} ms ({res['bare']['prompt_tokens']} tokens), bare generation of T "
        f"tokens {gen * 1000:.0f} ms, in-process audit {bare['engine_audit_1'] * 1000:.0f} ms "
        f"(bare forward with 1 torch thread: {bare['bare_forward_1_thread'] * 1000:.0f} ms).",
        "",
        "| batching | conc. | n | err | p50 s | p95 s | p99 s | req/s | mean batch | gain on/off "
        "| p50/fwd | p50/gen | load avg before -> after |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for mode in ("on", "off"):
        for lv in res["servers"].get(mode, {}).get("levels", []):
            c = lv["concurrency"]
            gain = res["gain"].get(str(c))
            mb = lv["mean_batch_size_metrics"]
            lines.append(
                f"| {mode} | {c} | {lv['n']} | {lv['errors']} | {lv['latency_s']['p50']:.2f} "
                f"| {lv['latency_s']['p95']:.2f} | {lv['latency_s']['p99']:.2f} | {lv['throughput_rps']:.2f} "
                f"| {'-' if mb is None else f'{mb:.2f}'} | {('x' + format(gain, '.2f')) if (gain and mode == 'on') else ''} "
                f"| {lv['p50_over_bare_forward']:.1f} | {lv['p50_over_bare_generate']:.2f} "
                f"| {lv['loadavg_before']} -> {lv['loadavg_after']} |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: a few requests per level")
    ap.add_argument("-T", "--max-new-tokens", type=int, default=16, dest="T")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (server and bare references)")
    ap.add_argument(
        "--requests", default="1:12,4:16,16:32", help="concurrency:requests per level (bounded count)"
    )
    ap.add_argument("--bare-repeats", type=int, default=7)
    ap.add_argument("--calib-records", type=int, default=80)
    ap.add_argument("--calib-T", type=int, default=16, help="T of the cached profile (only when calibrating)")
    ap.add_argument("--modes", default="on,off")
    ap.add_argument("--out-dir", default=str(HERE / "results" / "server"))
    ap.add_argument("--tag", default="", help="suffix of the result files (load-<tag>.json)")
    args = ap.parse_args()
    if args.quick:
        args.requests = "1:3,4:4,16:16"
        args.bare_repeats = 3

    levels = [(int(c), int(n)) for c, n in (x.split(":") for x in args.requests.split(","))]
    out_dir = Path(args.out_dir)
    cache = out_dir / "cache"
    prof = cache / "profile"
    run_dir = cache / f"run-{int(time.time())}"
    run_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()

    import torch

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE)
    res: dict[str, Any] = {
        "started_utc": _now(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "git_head": commit.stdout.strip(),
            "note": "shared machine: other jobs ran at the same time; see loadavg per phase",
        },
        "model": "default (SmolLM2-135M-Instruct, embedded)",
        "config": {
            "T": args.T,
            "threads": args.threads,
            "levels": levels,
            "modes": {m: MODES[m] for m in args.modes.split(",")},
            "quick": args.quick,
            "client": "closed loop, one thread + httpx.Client per concurrent client, loopback",
            "warmup_requests_per_server": 2,
            "server_request_timeout_s": REQUEST_TIMEOUT_S,
        },
        "loadavg_start": _load(),
    }
    print(f"start {res['started_utc']}, load avg {res['loadavg_start']}", flush=True)

    ph = _phase(res, "profile")
    res["profile"] = ensure_profile(prof, args.calib_records, args.calib_T, args.threads)
    pj = json.loads((prof / "profile.json").read_text())
    res["profile"].update(
        {
            "profile_hash": pj.get("profile_hash"),
            "profile_T": pj.get("max_new_tokens"),
            "n_traced": pj.get("data", {}).get("n_traced"),
            "n_clean": pj.get("data", {}).get("n_clean"),
            "layers": pj.get("crm", {}).get("layers"),
            "classifier": pj.get("crm", {}).get("classifier"),
        }
    )
    _end(ph)

    n_total = max(n for _, n in levels)
    reqs = pick_requests(max(n_total, 2) + 2)
    payloads = [
        {"context": r["context"], "query": r["query"], "options": {"max_new_tokens": args.T}} for r in reqs
    ]
    res["config"]["request_ids_first"] = [r["id"] for r in reqs[:8]]

    ph = _phase(res, "bare")
    res["bare"] = bare_reference(prof, reqs, args.T, args.threads, args.bare_repeats)
    gc.collect()
    b = res["bare"]["median_seconds"]
    print(
        f"bare forward {b['bare_forward'] * 1000:.1f} ms ({res['bare']['prompt_tokens']} tokens), "
        f"bare generate T={args.T} {b['bare_generate_T'] * 1000:.0f} ms, "
        f"in-process audit {b['engine_audit_1'] * 1000:.0f} ms",
        flush=True,
    )
    _end(ph)

    res["servers"] = {}
    for mode in args.modes.split(","):
        ph = _phase(res, f"server-{mode}")
        srv = Server(
            prof, run_dir / f"audits-{mode}.db", run_dir / f"server-{mode}.log", args.threads, MODES[mode]
        )
        info: dict[str, Any] = {"cmd": srv.cmd[2:], "startup_seconds": round(srv.startup_s, 1), "levels": []}
        res["servers"][mode] = info
        try:
            with srv.client() as c:  # warm-up, not counted
                for p in payloads[-2:]:
                    r = c.post("/v1/audit", json=p)
                    r.raise_for_status()
            for conc, n in levels:
                lb = _load()
                lv = run_level(srv, payloads[:n], conc)
                lv["loadavg_before"], lv["loadavg_after"] = lb, _load()
                lv["p50_over_bare_forward"] = round(lv["latency_s"]["p50"] / b["bare_forward"], 2)
                lv["p50_over_bare_generate"] = round(lv["latency_s"]["p50"] / b["bare_generate_T"], 3)
                info["levels"].append(lv)
                print(
                    f"  {mode:>3} c={conc:<2} n={lv['n']} err={lv['errors']} p50 {lv['latency_s']['p50']:.2f} s "
                    f"p95 {lv['latency_s']['p95']:.2f} s  {lv['throughput_rps']:.2f} req/s  "
                    f"batch {lv['mean_batch_size_metrics']}  load {lb} -> {lv['loadavg_after']}",
                    flush=True,
                )
                if lv["errors"]:
                    print(f"      errors: {lv['error_samples']}", flush=True)
        finally:
            info["exit_code"] = srv.stop()
        _end(ph)

    res["gain"] = {}
    if "on" in res["servers"] and "off" in res["servers"]:
        off = {lv["concurrency"]: lv for lv in res["servers"]["off"]["levels"]}
        for lv in res["servers"]["on"]["levels"]:
            o = off.get(lv["concurrency"])
            if o and o["throughput_rps"]:
                res["gain"][str(lv["concurrency"])] = round(lv["throughput_rps"] / o["throughput_rps"], 3)
    res["wall_seconds"] = round(time.perf_counter() - t_start, 1)
    res["finished_utc"] = _now()
    res["loadavg_end"] = _load()

    md = table(res)
    name = "load-quick" if args.quick else "load"
    if args.tag:
        name += f"-{args.tag}"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}.json").write_text(json.dumps(res, indent=1) + "\n")
    header = (
        f"# Audit server under load ({'quick smoke run' if args.quick else 'full run'})\n\n"
        f"`{res['command']}` - {res['started_utc']} to {res['finished_utc']}, wall {res['wall_seconds']} s; "
        f"{res['machine']['cpus']} CPUs, torch {res['machine']['torch']}, shared machine "
        f"(load avg 1/5/15 min at start {res['loadavg_start']}, at end {res['loadavg_end']}).\n"
        "Latency is client-side wall clock per request on loopback (closed loop); gain = throughput "
        "with batching on / off at the same concurrency; mean batch = audits per model batch "
        "(/metrics mnemoscope_batch_size).\n\n"
    )
    (out_dir / f"{name}.md").write_text(header + md + "\n")
    print()
    print(md)
    print(f"\nwall {res['wall_seconds']} s; written to {out_dir / (name + '.json')} and .md")


if __name__ == "__main__":
    main()
