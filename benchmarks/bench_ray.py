"""Throughput of the Ray engine against the local engine, on the same input, in one run.

The default model audits the same records (reliance items, the shipped profile, rule
``combined``, the profile's T) four ways, each into a fresh folder:

* ``local_1t``: :func:`~mnemoscope.audit.auditor.run_audit_file` in this process, 1 torch thread;
* ``local_2t``: the same with 2 torch threads (the whole machine);
* ``ray_1w``: ``--engine ray --workers 1`` (1 CPU, 1 thread per actor);
* ``ray_2w``: ``--engine ray --workers 2`` (1 CPU, 1 thread each).

Reported per variant: wall seconds end to end (Ray: actor start-up and model load included),
seconds to the first finished batch, steady-state records/s after it (what a long job sees),
the load average before and after (other processes share the machine), and whether every
record equals the local engine's (same batches: byte-equal lines).

``--driver`` measures instead what stays in the one driver process whatever the cluster size
(the bound on N workers): validating input records (the local reader) and appending result lines
batch by batch with fsync, on synthetic records, without a model.

Usage: python benchmarks/bench_ray.py [--n 48] [--batch-size 8] [--out benchmarks/results/ray/throughput.json]
       python benchmarks/bench_ray.py --driver [--n 20000] [--out benchmarks/results/ray/driver.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _max_abs_diff(a: Any, b: Any) -> float:
    """Largest difference between two JSON values' numbers (inf if their structure differs)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return 0.0 if a == b else float("inf")
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(float(a) - float(b))
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return max((_max_abs_diff(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return max((_max_abs_diff(x, y) for x, y in zip(a, b, strict=True)), default=0.0)
    return 0.0 if a == b else float("inf")


def _rows(path: Path) -> dict[str, str]:
    return {str(json.loads(x)["id"]): x for x in path.read_text(encoding="utf-8").splitlines() if x.strip()}


def driver(n: int, batch_size: int, out: str) -> None:
    """Records/s of the driver's own work: validation and fsynced appends (no model, no Ray)."""
    from mnemoscope.audit.auditor import parse_audit_lines
    from mnemoscope.provenance import provenance

    work = Path(tempfile.mkdtemp(prefix="bench_ray_driver_"))
    lines = [
        json.dumps(
            {"id": f"r{i}", "context": "The town of Zor lies on the river Ka. " * 8, "query": f"Where {i}?"}
        ).encode()
        for i in range(n)
    ]
    t0 = time.perf_counter()
    ok = sum(1 for _, item in parse_audit_lines(lines) if not isinstance(item, Exception))
    t_parse = time.perf_counter() - t0
    # a typical audit result line of the default model (T=32) is ~12 kB of JSON
    result_line = json.dumps(
        {"id": "x", "tokens": [{"text": "tok", "pmi": 0.123456789}] * 32, "pad": "x" * 9000}
    )
    t0 = time.perf_counter()
    with (work / "results.jsonl").open("ab") as f:
        for start in range(0, n, batch_size):
            f.write("".join(result_line + "\n" for _ in range(min(batch_size, n - start))).encode())
            f.flush()
            os.fsync(f.fileno())
    t_write = time.perf_counter() - t0
    res = {
        **provenance(),
        "n_records": n,
        "validated": ok,
        "validate_records_per_s": round(n / t_parse),
        "result_line_bytes": len(result_line) + 1,
        "batch_size": batch_size,
        "append_fsync_records_per_s": round(n / t_write),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }
    shutil.rmtree(work, ignore_errors=True)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=48, help="records")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--out", default=None)
    ap.add_argument("--driver", action="store_true", help="measure the driver's own per-record work")
    args = ap.parse_args()
    if args.driver:
        driver(args.n, args.batch_size, args.out or str(ROOT / "benchmarks/results/ray/driver.json"))
        return
    args.out = args.out or str(ROOT / "benchmarks" / "results" / "ray" / "throughput.json")

    import ray
    import torch

    from mnemoscope.audit.auditor import Auditor, run_audit_file
    from mnemoscope.bench.reliance import load_reliance
    from mnemoscope.pipelines.ray import RayOptions, ray_audit_file
    from mnemoscope.provenance import provenance

    rel = load_reliance()
    picked = rel[:: max(1, len(rel) // args.n)][: args.n]
    work = Path(tempfile.mkdtemp(prefix="bench_ray_"))
    inp = work / "in.jsonl"
    inp.write_text(
        "".join(
            json.dumps({"id": r["id"], "context": r["context"], "query": r["query"]}) + "\n" for r in picked
        )
    )
    result: dict[str, Any] = {
        **provenance(),
        "n_records": len(picked),
        "batch_size": args.batch_size,
        "model": "default (SmolLM2-135M-Instruct, float32, CPU)",
        "env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")},
        "ray": ray.__version__,
        "variants": {},
    }
    auditor = Auditor.from_spec("default", batch_size=args.batch_size)
    result["max_new_tokens"] = auditor.profile.max_new_tokens
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    reference: dict[str, str] | None = None

    def record(name: str, out: Path, seconds: float, extra: dict[str, Any], load0: tuple[float, ...]) -> None:
        nonlocal reference
        rows = _rows(out / "results.jsonl")
        if reference is None:
            reference = rows
        n = len(rows)
        v: dict[str, Any] = {
            "seconds": round(seconds, 2),
            "records_per_s": round(n / seconds, 4),
            "n_audited": n,
            "equal_to_local_1t": rows == reference,
            "max_abs_diff_vs_local_1t": max(
                (_max_abs_diff(json.loads(rows[k]), json.loads(reference[k])) for k in reference), default=0.0
            )
            if rows.keys() == reference.keys()
            else None,
            "loadavg_before": [round(x, 2) for x in load0],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            **extra,
        }
        result["variants"][name] = v
        print(name, json.dumps(v), flush=True)

    for threads in (1, 2):
        torch.set_num_threads(threads)
        out = work / f"local_{threads}t"
        load0 = os.getloadavg()
        t0 = time.perf_counter()
        run_audit_file(auditor, inp, out, progress=False)
        record(f"local_{threads}t", out, time.perf_counter() - t0, {"threads": threads}, load0)
    del auditor
    for workers in (1, 2):
        out = work / f"ray_{workers}w"
        load0 = os.getloadavg()
        t0 = time.perf_counter()
        s = ray_audit_file(
            inp, out, options=RayOptions(workers=workers, batch_size=args.batch_size, progress=False)
        )
        eng = s["engine"]
        first = eng["first_batch_seconds"]
        steady_n = len(picked) - eng["first_batch_records"]
        extra = {
            "workers": workers,
            "threads_per_worker": eng["threads_per_worker"],
            "first_batch_seconds": first,
            "steady_records_per_s": round(steady_n / (eng["seconds"] - first), 4)
            if eng["seconds"] > first
            else None,
            "batches_per_worker_pid": eng["batches_per_worker_pid"],
        }
        record(f"ray_{workers}w", out, time.perf_counter() - t0, extra, load0)
    ray.shutdown()
    shutil.rmtree(work, ignore_errors=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
