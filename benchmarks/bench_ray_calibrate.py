"""A calibration's tracing on the Ray engine: per-worker rates, correctness, scaling on paper.

The default model traces the first ``--n`` shipped calibration records with the settings
calibration traces with today (prompt A, plain task, the model's chat template, T = 32, the
closed-book answer, no hidden states, lockstep decode) three ways, each into a fresh folder:

* ``local``: :func:`~mnemoscope.trace.pipeline.run_pairs` in this process, 1 torch thread (the
  reference the Ray traces must equal);
* ``ray_1w``: :class:`~mnemoscope.pipelines.ray.RayTraceEngine`, 1 worker (1 CPU, 1 thread);
* ``ray_2w``: the same with 2 workers (1 CPU, 1 thread each).

Measured per Ray run: wall seconds (actor start-up and model load included), seconds to the first
finished batch, and per worker its own batch time and records per such second (``busy`` rate:
what a worker does when it has a core, without start-up or waiting), plus the driver's writing
time, and the load average before and after (other processes share the machine).

On paper: a machine with a free core for each worker's thread keeps every worker at the
1-worker rate ``r1``, so 2 workers trace ``2 r1`` records/s, bounded by the driver's own writing
rate ``D``; end to end, the actors' start-up ``s`` is paid once per run, in parallel, and the
batches are shared out whole: ``T(w) = s + ceil(batches / w) * batch / r1``.

Usage: nice -n 10 python benchmarks/bench_ray_calibrate.py [--n 32] [--batch-size 4]
       [--out benchmarks/results/ray/calibrate_scaling.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _compare(a_dir: Path, b_dir: Path) -> dict[str, Any]:
    """Same ids and answers; the largest log-prob / KL difference (0.0 = bit for bit)."""
    import numpy as np

    from mnemoscope.trace.store import load_traces

    a = {t.id: t for t in load_traces(a_dir)}
    b = {t.id: t for t in load_traces(b_dir)}
    same_answers = a.keys() == b.keys() and all(
        (a[k].answer_with, a[k].answer_without) == (b[k].answer_with, b[k].answer_without)
        and np.array_equal(a[k].answer_ids, b[k].answer_ids)
        for k in a
    )
    diff = 0.0
    if same_answers:
        for k in a:
            for name in ("logprob_answer_with", "logprob_answer_without", "kl_steps", "topk_logprobs_with"):
                x, y = getattr(a[k], name), getattr(b[k], name)
                diff = max(diff, float(np.max(np.abs(x - y))) if x.size else 0.0)
    return {"same_ids_and_answers": same_answers, "max_abs_diff_logprob_kl": diff if same_answers else None}


def _index_ids(folder: Path) -> list[str]:
    return [str(json.loads(x)["id"]) for x in (folder / "index.jsonl").read_text().splitlines() if x.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=32, help="shipped calibration records (the first N)")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--no-local", action="store_true", help="skip the in-process reference run")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/ray/calibrate_scaling.json"))
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")

    import torch

    from mnemoscope.audit.profile import CalibrationConfig
    from mnemoscope.bench.calibration_data import default_path
    from mnemoscope.data import read_records
    from mnemoscope.models import load_model
    from mnemoscope.pipelines.ray import RayOptions, RayTraceEngine, connect
    from mnemoscope.provenance import provenance
    from mnemoscope.trace import PairConfig, PromptBuilder
    from mnemoscope.trace.pipeline import run_pairs
    from mnemoscope.trace.templates import default_stops

    torch.set_num_threads(1)
    records, _ = read_records(default_path())
    records = list(records[: args.n])
    lm = load_model("default")
    c = CalibrationConfig()
    chat = bool(lm.info.has_chat_template) if c.chat == "auto" else bool(c.chat)
    config = PairConfig(
        builder=PromptBuilder(template=c.template, task=c.task, chat=chat, stop=default_stops(chat)),
        max_new_tokens=c.max_new_tokens,
        answer_without=True,
        hidden=False,
    )
    work = Path(tempfile.mkdtemp(prefix="bench_ray_calibrate_"))
    result: dict[str, Any] = {
        **provenance(),
        "model": lm.info.name,
        "n_records": len(records),
        "records": f"the first {len(records)} of {default_path().name} (shipped)",
        "batch_size": args.batch_size,
        "max_new_tokens": c.max_new_tokens,
        "pair_config": config.to_dict(),
        "decode": "lockstep",
        "threads_per_worker": 1,
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "runs": {},
    }
    runs = result["runs"]
    if not args.no_local:
        load0, t0 = _load(), time.perf_counter()
        run_pairs(lm, records, work / "local", config=config, batch_size=args.batch_size, decode="lockstep",
                  progress=False)  # fmt: skip
        secs = time.perf_counter() - t0
        runs["local_1t"] = {
            "wall_seconds": round(secs, 2),
            "records_per_second": round(len(records) / secs, 4),
            "loadavg_before": load0,
            "loadavg_after": _load(),
        }
        print("local_1t", json.dumps(runs["local_1t"]), flush=True)
    connect(RayOptions(progress=False))
    for workers in (1, 2):
        name = f"ray_{workers}w"
        options = RayOptions(workers=workers, cpus_per_worker=1, batch_size=args.batch_size, progress=False)
        engine = RayTraceEngine.for_model(lm, options)
        load0, t0 = _load(), time.perf_counter()
        summary = engine.trace(records, work / name, config, progress=False)
        secs = time.perf_counter() - t0
        eng = json.loads((work / name / "runs.jsonl").read_text().splitlines()[-1])
        ids = _index_ids(work / name)
        runs[name] = {
            "wall_seconds": round(secs, 2),
            "records_per_second_end_to_end": round(len(records) / secs, 4),
            "first_batch_seconds": eng["first_batch_seconds"],
            "per_worker": eng["per_worker"],
            "driver_seconds": eng["driver_seconds"],
            "n_traced": summary.n_traced,
            "every_id_once": sorted(ids) == sorted(r.id for r in records) and len(ids) == len(set(ids)),
            "loadavg_before": load0,
            "loadavg_after": _load(),
        }
        if not args.no_local:
            runs[name]["vs_local_1t"] = _compare(work / "local", work / name)
        print(name, json.dumps(runs[name]), flush=True)
    result["ray_2w_vs_ray_1w"] = _compare(work / "ray_1w", work / "ray_2w")

    # on paper: every worker on a free core keeps the 1-worker busy rate
    w1 = next(iter(runs["ray_1w"]["per_worker"].values()))
    r1 = float(w1["records_per_second"])
    n, b = len(records), args.batch_size
    driver_rate = n / runs["ray_2w"]["driver_seconds"] if runs["ray_2w"]["driver_seconds"] else math.inf
    startup = max(0.0, float(runs["ray_1w"]["first_batch_seconds"]) - b / r1)
    batches = math.ceil(n / b)

    def wall(workers: int, n_batches: int) -> float:
        return startup + math.ceil(n_batches / workers) * b / r1

    measured_2w = [float(v["records_per_second"]) for v in runs["ray_2w"]["per_worker"].values()]
    result["projection"] = {
        "assumes": "each worker has a free core for its 1 thread (no other load), so it keeps the measured "
        "1-worker busy rate r1; the driver writes at its measured rate D; actors start in parallel",
        "r1_records_per_second_per_worker": r1,
        "measured_per_worker_rates_with_2_workers_here": measured_2w,
        "driver_records_per_second": round(driver_rate, 1),
        "actor_startup_seconds": round(startup, 2),
        "steady_speedup_2w": round(min(2 * r1, driver_rate) / min(r1, driver_rate), 3),
        f"end_to_end_speedup_2w_{n}_records": round(wall(1, batches) / wall(2, batches), 3),
        "end_to_end_speedup_2w_1000_records": round(
            wall(1, math.ceil(1000 / b)) / wall(2, math.ceil(1000 / b)), 3
        ),
        "measured_speedup_here_end_to_end": round(
            runs["ray_1w"]["wall_seconds"] / runs["ray_2w"]["wall_seconds"], 3
        ),
        "measured_speedup_here_busy_rates": round(sum(measured_2w) / r1, 3),
    }
    print("projection", json.dumps(result["projection"]), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
