"""The default calibration end to end, as a user runs it, against an earlier commit, side by side.

``bench_calibrate.py`` times the tracing step alone. This one runs the whole command a new user
runs, ``mnemoscope calibrate --max-records N --out DIR`` on the embedded default model (draw,
tracing, label verification, fit, certification, held-out validation, card), in two source trees
at once: the current checkout and ``--base`` (a commit checked out into a temporary worktree).
Both runs get the same records, seed and thread count and start together, one process per
tree with ``--threads`` torch threads each, so machine load hits both alike; with ``--serial``
they run one after the other instead. In the same run it times ``mnemoscope audit --input`` on
``--audit-n`` of the same records with the current tree (the cost a calibration record is
compared with: the issue's target is calibrating a record at <= 0.5x auditing one). The audit
generates each answer (the records' reference answers are left out), as an application's audit
does.

Reported: wall seconds, records traced (the profile's ``data.n_traced``), seconds per traced
record, records per second and the ratio new/base; the audit's seconds per item; the load
average before and after; both commits.

Usage:
    OMP_NUM_THREADS=1 python benchmarks/bench_calibrate_e2e.py --base 4df9226 [--max-records 96]
        [--threads 1] [--audit-n 32] [--serial] [--out benchmarks/results/calibration/bench_calibrate_e2e.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mnemoscope.provenance import provenance

ROOT = Path(__file__).resolve().parents[1]


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _env(tree: Path, threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree / "src")
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    env["PYTHONHASHSEED"] = "0"
    return env


def _calibrate_cmd(out: Path, n: int, threads: int, seed: int) -> list[str]:
    return [
        sys.executable, "-m", "mnemoscope", "calibrate", "--max-records", str(n), "--out", str(out),
        "--threads", str(threads), "--seed", str(seed), "--overwrite",
    ]  # fmt: skip


def _start(tree: Path, cmd: list[str], threads: int, log: Path) -> tuple[subprocess.Popen, float]:
    fh = open(log, "w")  # noqa: SIM115 - closed when the process is reaped
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=tree, env=_env(tree, threads), stdout=fh, stderr=subprocess.STDOUT)
    return proc, t0


def _finish(name: str, proc: subprocess.Popen, t0: float, log: Path) -> float:
    rc = proc.wait()
    dt = time.perf_counter() - t0
    if rc != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise SystemExit(f"{name}: exit {rc} after {dt:.0f} s; log {log}:\n{tail}")
    return dt


def _traced(out: Path) -> dict[str, Any]:
    header = json.loads((out / "profile.json").read_text())
    data = header.get("data") or {}
    return {k: data.get(k) for k in ("n_traced", "n_verified", "n_clean", "n_memory", "n_traces_reused")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--base", required=True, help="the commit to compare with (checked out into a temporary worktree)"
    )
    ap.add_argument("--max-records", type=int, default=96)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--audit-n", type=int, default=32, help="records audited with --input by the current tree"
    )
    ap.add_argument("--serial", action="store_true", help="one tree after the other instead of side by side")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/calibration/bench_calibrate_e2e.json"))
    args = ap.parse_args()

    base = _git("rev-parse", args.base)
    head = _git("rev-parse", "HEAD")
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="mnemoscope-e2e-") as tmp_s:
        tmp = Path(tmp_s)
        base_tree = tmp / "base"
        _git("worktree", "add", "--detach", str(base_tree), base)
        try:
            runs = {"new": (ROOT, tmp / "new"), "base": (base_tree, tmp / "base-out")}
            seconds: dict[str, float] = {}
            if args.serial:
                for name, (tree, out) in runs.items():
                    log = tmp / f"{name}.log"
                    proc, t0 = _start(
                        tree,
                        _calibrate_cmd(out, args.max_records, args.threads, args.seed),
                        args.threads,
                        log,
                    )
                    seconds[name] = _finish(name, proc, t0, log)
            else:
                started = {
                    name: (*_start(tree, _calibrate_cmd(out, args.max_records, args.threads, args.seed), args.threads, tmp / f"{name}.log"), tmp / f"{name}.log")
                    for name, (tree, out) in runs.items()
                }  # fmt: skip
                for name, (proc, t0, log) in started.items():
                    seconds[name] = _finish(name, proc, t0, log)
            traced = {name: _traced(out) for name, (_, out) in runs.items()}

            # the audit of N of the same records, by the current tree, alone on the machine
            records = tmp / "audit_input.jsonl"
            shipped = ROOT / "src/mnemoscope/bench/data/calibration.jsonl"
            every = [json.loads(ln) for ln in shipped.read_text().splitlines() if ln.strip()]
            picked = every[:: max(1, len(every) // args.audit_n)][: args.audit_n]  # spread over the kinds
            # the audit generates the answer, as an application's audit does (no given answer)
            lines = [json.dumps({k: r[k] for k in ("id", "context", "query")}) for r in picked]
            records.write_text("\n".join(lines) + "\n")
            audit_cmd = [
                sys.executable, "-m", "mnemoscope", "audit", "--input", str(records), "--profile", str(runs["new"][1]),
                "--out", str(tmp / "audit-out"), "--threads", str(args.threads),
            ]  # fmt: skip
            proc, t0 = _start(ROOT, audit_cmd, args.threads, tmp / "audit.log")
            audit_s = _finish("audit", proc, t0, tmp / "audit.log")
        finally:
            _git("worktree", "remove", "--force", str(base_tree))
    load_end = os.getloadavg()

    spr = {name: seconds[name] / max(1, traced[name]["n_traced"] or 0) for name in seconds}
    audit_per_item = audit_s / len(lines)
    out = {
        **provenance(),
        "machine": {"cpu_count": os.cpu_count(), "threads_per_run": args.threads, "side_by_side": not args.serial,
                    "load_avg_start": [round(x, 2) for x in load_start], "load_avg_end": [round(x, 2) for x in load_end]},
        "commits": {"new": head, "base": base},
        "command": f"calibrate --max-records {args.max_records} --threads {args.threads} --seed {args.seed}",
        "seconds": {k: round(v, 1) for k, v in seconds.items()},
        "traced": traced,
        "seconds_per_traced_record": {k: round(v, 3) for k, v in spr.items()},
        "records_per_second": {k: round(1 / v, 4) for k, v in spr.items()},
        "speedup_new_vs_base": round(spr["base"] / spr["new"], 2),
        "audit": {"n": len(lines), "seconds": round(audit_s, 1), "seconds_per_item": round(audit_per_item, 3)},
        "calibrate_record_vs_audit_item": {k: round(v / audit_per_item, 2) for k, v in spr.items()},
    }  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: out[k] for k in ("seconds", "seconds_per_traced_record", "speedup_new_vs_base", "audit", "calibrate_record_vs_audit_item", "machine")}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
