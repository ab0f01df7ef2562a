"""The streaming driver: one Ray Data row per batch out, each finished batch handed back once.

The driver cuts the pending records into the local engine's batches, submits them as rows of a
Ray Data dataset mapped by an actor pool, and streams the finished batches back in completion
order. Exactly once, in three layers:

1. Ray restarts a dead actor and re-runs the batch it held (``max_restarts`` /
   ``max_task_retries`` = :attr:`RayOptions.max_retries`);
2. when Ray gives up all the same, the driver submits the batches it has not yet received again,
   on fresh actors (:attr:`RayOptions.resubmits` times), keeping their batch numbers;
3. a batch number already handed to the caller is dropped (counted in :attr:`RunStats.duplicates`),
   and the callers' writers never write an id their folder already holds.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import pickle
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mnemoscope.errors import MnemoscopeError
from mnemoscope.pipelines.ray.connect import RayOptions

__all__ = [
    "RunStats",
    "chunked",
    "engine_record",
    "is_worker_loss",
    "log_run",
    "model_kwargs",
    "pickled",
    "stream",
]

log = logging.getLogger(__name__)


@dataclass
class RunStats:
    """What the driver saw: batches written, duplicates dropped, which actor did what."""

    written_chunks: set[int] = dataclasses.field(default_factory=set)
    duplicates: int = 0
    resubmitted: int = 0  # driver-level re-submissions (rounds)
    started: float = dataclasses.field(default_factory=time.perf_counter)
    first_batch_seconds: float | None = None  # actor start-up + model load + one batch
    first_batch_records: int = 0
    per_pid: dict[int, int] = dataclasses.field(default_factory=dict)  # batches per actor pid
    per_pid_records: dict[int, int] = dataclasses.field(default_factory=dict)
    per_pid_seconds: dict[int, float] = dataclasses.field(default_factory=dict)  # actors' own batch time
    driver_seconds: float = 0.0  # time in the caller's writer (the driver's share of each batch)
    n_ok: int = 0

    def per_worker(self) -> dict[str, dict[str, Any]]:
        """Per actor pid: batches, records (traced or failed), seconds of its own batch work and
        records per such second (the worker's rate, without start-up or waiting)."""
        return {
            str(pid): {
                "batches": n,
                "records": self.per_pid_records.get(pid, 0),
                "busy_seconds": round(self.per_pid_seconds.get(pid, 0.0), 3),
                "records_per_second": (
                    round(self.per_pid_records.get(pid, 0) / self.per_pid_seconds[pid], 4)
                    if self.per_pid_seconds.get(pid)
                    else None
                ),
            }
            for pid, n in sorted(self.per_pid.items())
        }


def is_worker_loss(ray: Any, exc: BaseException) -> bool:
    """Whether ``exc`` means an actor or its node died (worth submitting the batch again), not
    that the work itself failed (a model that does not load, a bad record, a folder refused)."""
    lost = (
        ray.exceptions.RayActorError,  # ActorDiedError, ActorUnavailableError
        ray.exceptions.WorkerCrashedError,
        ray.exceptions.ObjectLostError,
        ray.exceptions.NodeDiedError,
    )
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or any(e is s for s in seen):
            continue
        seen.append(e)
        todo += [e.__cause__, e.__context__, getattr(e, "cause", None)]
    if any(isinstance(e, MnemoscopeError) for e in seen):
        return False
    return any(isinstance(e, lost) for e in seen)


def _dataset(
    ray: Any, worker: type, kwargs: dict[str, Any], items: list[dict[str, Any]], options: RayOptions
) -> Any:
    env = {
        "OMP_NUM_THREADS": str(options.threads),
        "MKL_NUM_THREADS": str(options.threads),
        "TOKENIZERS_PARALLELISM": "false",
    }
    with warnings.catch_warnings():
        # max_restarts/max_task_retries have no named parameter yet in Ray 2.60 (its default is to
        # retry forever, which a record that always kills its actor would do): pass them anyway.
        warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated", category=Warning)
        return ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
            worker,
            fn_constructor_kwargs=kwargs,
            batch_size=1,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=min(options.workers, len(items))),
            num_cpus=options.cpus_per_worker,
            num_gpus=options.gpus_per_worker or None,
            runtime_env={"env_vars": env},
            max_restarts=options.max_retries,
            max_task_retries=options.max_retries,
        )


def stream(
    ray: Any,
    worker: type,
    kwargs: dict[str, Any],
    chunks: Sequence[list[Any] | bytes],
    options: RayOptions,
    on_batch: Callable[[dict[str, Any]], None],
    desc: str,
    run: RunStats,
) -> RunStats:
    """Run ``worker`` over ``chunks`` (one Ray Data row each) and hand each finished batch to
    ``on_batch`` exactly once, in completion order.

    An error raised by ``on_batch`` (a refused folder, ``--on-error raise``) stops the run at
    once. A lost actor that Ray's own retries did not cover ends the round: the batches not yet
    handed over are submitted again (:attr:`RayOptions.resubmits` rounds at most), each under its
    first batch number, so a late duplicate is still recognised and dropped.
    """
    from tqdm.auto import tqdm

    if not chunks:
        return run
    if not options.progress:
        logging.getLogger("ray.data").setLevel(logging.WARNING)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False  # ours counts batches of records
    ctx.execution_options.preserve_order = False
    all_items = [
        {"chunk": i, "records": c if isinstance(c, bytes) else json.dumps(c, ensure_ascii=False)}
        for i, c in enumerate(chunks)
    ]
    with tqdm(total=len(chunks), desc=desc, unit="batch", disable=not options.progress) as bar:
        while True:
            items = [x for x in all_items if x["chunk"] not in run.written_chunks]
            if not items:
                break
            batches = _dataset(ray, worker, kwargs, items, options).iter_batches(
                batch_size=None, batch_format="numpy", prefetch_batches=0
            )
            try:
                for block in batches:
                    for i in range(len(block["chunk"])):
                        if _hand_over({k: block[k][i] for k in block}, chunks, on_batch, run):
                            bar.update(1)
                break
            except Exception as e:
                if run.resubmitted >= options.resubmits or not is_worker_loss(ray, e):
                    raise
                run.resubmitted += 1
                log.warning(
                    "%s: a worker was lost (%s); submitting the %d batches not yet written again (%d/%d)",
                    desc,
                    type(e).__name__,
                    len(all_items) - len(run.written_chunks),
                    run.resubmitted,
                    options.resubmits,
                )
    return run


def _hand_over(
    row: dict[str, Any],
    chunks: Sequence[list[Any] | bytes],
    on_batch: Callable[[dict[str, Any]], None],
    run: RunStats,
) -> bool:
    chunk = int(row["chunk"])
    if chunk in run.written_chunks:
        run.duplicates += 1
        return False
    t0 = time.perf_counter()
    on_batch(row)
    run.driver_seconds += time.perf_counter() - t0
    if run.first_batch_seconds is None:
        run.first_batch_seconds = round(time.perf_counter() - run.started, 3)
        run.first_batch_records = len(chunks[chunk]) if isinstance(chunks[chunk], list) else 0
    run.written_chunks.add(chunk)
    pid = int(row["pid"])
    run.per_pid[pid] = run.per_pid.get(pid, 0) + 1
    n = len(json.loads(row["ids"])) + len(json.loads(row["errors"]))
    run.per_pid_records[pid] = run.per_pid_records.get(pid, 0) + n
    run.per_pid_seconds[pid] = run.per_pid_seconds.get(pid, 0.0) + float(row["seconds"])
    return True


def pickled(records: list[Any]) -> bytes:
    """One batch for an actor (records of our own classes, between this job's own processes only)."""
    return pickle.dumps(records, protocol=pickle.HIGHEST_PROTOCOL)


def chunked(items: Sequence[Any], size: int) -> list[list[Any]]:
    """The local engine's batches: ``size`` items each, in order."""
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def log_run(out: Path, record: dict[str, Any]) -> None:
    """One line per Ray run in ``out/runs.jsonl``."""
    with (out / "runs.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps(record, default=str) + "\n")


def model_kwargs(
    model: str | Callable[[Any], Any],
    adapter: str | None,
    device: str | None,
    dtype: str | None,
    cache_dir: str | None,
) -> dict[str, Any]:
    """What an actor loads: a spec and its flags, or a loader (``model`` callable)."""
    return {"model": model, "adapter": adapter, "device": device, "dtype": dtype, "cache_dir": cache_dir}


def engine_record(options: RayOptions, ray: Any, run: RunStats, seconds: float) -> dict[str, Any]:
    """The Ray settings and who did what, for summaries and ``runs.jsonl``."""
    return {
        "engine": "ray",
        "ray_version": ray.__version__,
        "address": options.address or "local",
        "workers": options.workers,
        "cpus_per_worker": options.cpus_per_worker,
        "gpus_per_worker": options.gpus_per_worker,
        "threads_per_worker": options.threads,
        "batch_size": options.batch_size,
        "batches_per_worker_pid": {str(k): v for k, v in sorted(run.per_pid.items())},
        "per_worker": run.per_worker(),
        "driver_seconds": round(run.driver_seconds, 3),
        "duplicate_batches_dropped": run.duplicates,
        "resubmitted_rounds": run.resubmitted,
        "first_batch_seconds": run.first_batch_seconds,
        "first_batch_records": run.first_batch_records,
        "seconds": round(seconds, 3),
        "finished": time.time(),
    }
