"""The file runners: a batch audit, paired tracing, and ``repcs score`` on a Ray cluster.

Each reads and validates its input in the driver as the local engine does, skips what the output
already holds, streams the rest through :func:`~mnemoscope.pipelines.ray.driver.stream` and
writes what comes back the local engine's way. :class:`RayTraceEngine` is the paired tracing as
an engine object, for the calibration pipeline.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import pickle
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from mnemoscope.errors import InputError, ModelMismatchError
from mnemoscope.pipelines.ray.actors import AuditWorker, ModelLoader, ScoreWorker, TraceWorker, probe
from mnemoscope.pipelines.ray.connect import RayOptions, connect
from mnemoscope.pipelines.ray.driver import (
    RunStats,
    chunked,
    engine_record,
    log_run,
    model_kwargs,
    pickled,
    stream,
)

__all__ = ["RayTraceEngine", "ray_audit_file", "ray_run_pairs", "ray_score_file"]

log = logging.getLogger(__name__)


# -- audit --------------------------------------------------------------------------------------------


def _audit_inputs(path: Path) -> Iterable[tuple[int, Any]]:
    """JSONL lines, or Parquet rows turned into JSON lines: both go through the local reader's checks.

    A Parquet file's columns are its schema, not a record's choice: only the record fields
    (``AUDIT_RECORD_FIELDS``) are read, and the other columns (e.g. a label, or the index column a
    dataframe writes) are named once in a warning instead of failing every row."""
    from mnemoscope.audit.auditor import parse_audit_lines, read_audit_inputs
    from mnemoscope.audit.requests import AUDIT_RECORD_FIELDS

    if path.suffix.lower() not in (".parquet", ".pq"):
        return read_audit_inputs(path)
    import pyarrow.parquet as pq

    names = pq.ParquetFile(path).schema_arrow.names
    other = [c for c in names if c not in AUDIT_RECORD_FIELDS]
    if other:
        log.warning("%s: columns not read (a record has only %s): %s", path, ", ".join(AUDIT_RECORD_FIELDS),
                    ", ".join(other))  # fmt: skip
    columns = [c for c in names if c in AUDIT_RECORD_FIELDS]

    def lines() -> Iterable[bytes]:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=4096, columns=columns):
            for row in batch.to_pylist():
                clean = {k: v for k, v in row.items() if v is not None or k == "id"}
                yield json.dumps(clean, ensure_ascii=False, default=str).encode("utf-8")

    return parse_audit_lines(lines())


def ray_audit_file(
    input_path: str | Path,
    out_dir: str | Path,
    *,
    model: str | Callable[[Any], Any] = "default",
    adapter: str | None = None,
    device: str | None = None,
    dtype: str | None = None,
    cache_dir: str | None = None,
    profile: str | Path | None = None,
    rule: str = "combined",
    options: RayOptions | None = None,
    overwrite: bool = False,
    parquet: bool = True,
    early_stop: int = 8,
    command: Sequence[str] | None = None,
) -> dict[str, Any]:
    """:func:`~mnemoscope.audit.auditor.run_audit_file` on a Ray cluster (same folder, same lines).

    ``input_path`` is JSONL or Parquet (``.parquet``: one row per record, same fields).
    ``command``: this run's command line for the folder's run record (default: ``sys.argv``).
    Returns the local engine's summary plus ``engine`` (the Ray settings and who did what).
    """
    from mnemoscope.audit.auditor import input_error_row, note_outcomes
    from mnemoscope.audit.parquet import write_results_parquet
    from mnemoscope.audit.results import EarlyStop, ResultsFolder

    options = options or RayOptions()
    ray = connect(options)
    t0 = time.perf_counter()
    out = Path(out_dir)
    folder = ResultsFolder(out, None, overwrite=overwrite, extra_files=("results.parquet",), command=command)
    results_path = folder.results.path
    done = folder.done_ids
    n_done_before = len(done)
    errors: list[dict[str, Any]] = []
    todo: list[tuple[int, dict[str, Any]]] = []
    n_lines = 0
    for lineno, item in _audit_inputs(Path(input_path)):
        n_lines += 1
        if isinstance(item, InputError):
            errors.append(input_error_row(lineno, item))
        elif item.id not in done:
            todo.append((lineno, dataclasses.asdict(item)))
    kwargs = {
        "model": model_kwargs(model, adapter, device, dtype, cache_dir),
        "auditor": {
            "profile": None if profile is None else str(profile),
            "rule": rule,
            "batch_size": options.batch_size,
        },
        "threads": options.threads,
    }
    stop = EarlyStop(early_stop, what="audit (ray)")

    def check(identity_json: str) -> None:
        # the first batch back: same identity as the folder, or refuse
        folder.check_identity(json.loads(identity_json))

    def on_batch(row: dict[str, Any]) -> None:
        check(str(row["identity"]))
        ids = json.loads(row["ids"])
        lines = [line for line in bytes(row["payload"]).decode("utf-8").splitlines() if line]
        fresh = [x for x, i in zip(lines, ids, strict=True) if i not in done]  # never write an id twice
        folder.append(fresh)
        done.update(ids)
        run.n_ok += len(fresh)
        failed = json.loads(row["errors"])
        errors.extend(failed)
        note_outcomes(stop, len(fresh), failed)

    run = RunStats()
    if not todo and (out / "meta.json").is_file():
        check(probe(ray, AuditWorker, kwargs, options.cpus_per_worker, options.gpus_per_worker))
    with folder.recording(errors, stopped_by=Exception):
        stream(
            ray, AuditWorker, kwargs, chunked(todo, options.batch_size), options, on_batch, "audit (ray)", run
        )
    if parquet:
        write_results_parquet(results_path, out / "results.parquet")
    engine = engine_record(options, ray, run, time.perf_counter() - t0)
    log_run(out, {"job": "audit", "input": str(input_path), **engine})
    summary = {
        "records": n_lines,
        "audited": run.n_ok,
        "skipped_done": n_done_before,
        "errors": len(errors),
        "out": str(out),
        "engine": engine,
    }
    log.info("audit (ray): %s", summary)
    return summary


# -- paired traces ------------------------------------------------------------------------------------


def ray_run_pairs(
    records: Sequence[Any],
    out: str | Path,
    *,
    config: Any,
    model: str | Callable[[Any], Any] = "default",
    adapter: str | None = None,
    device: str | None = None,
    dtype: str | None = None,
    cache_dir: str | None = None,
    input_errors: Sequence[Any] = (),
    on_error: str = "skip",
    overwrite: bool = False,
    options: RayOptions | None = None,
    decode: str = "teacher-forced",
    expect_fingerprint: str | None = None,
) -> Any:
    """:func:`~mnemoscope.trace.pipeline.run_pairs` on a Ray cluster: the same trace folder.

    ``config`` is a :class:`~mnemoscope.trace.pair.PairConfig` or a picklable function of the
    loaded model returning one (settings decided by the model, e.g. its chat template).
    ``decode`` is :data:`~mnemoscope.trace.pipeline.Decode`, as for ``run_pairs``.

    Ids already in the folder are skipped; each record is written once, whatever the actors do:
    the driver drops a batch it has already written, and never writes an id the folder holds
    (a batch retried after its actor died may come back twice).

    The folder's ``meta.json`` is written from the first actor's model identity, so a resumed
    folder of another model or other settings is refused (:class:`TraceStoreError`) before any
    trace is written. ``expect_fingerprint``: the weights the actors must have loaded (the
    driver's model), else :class:`~mnemoscope.errors.ModelMismatchError` before anything is
    written. Returns the local :class:`~mnemoscope.trace.pipeline.RunSummary`.
    """
    from mnemoscope.trace.pipeline import RunSummary
    from mnemoscope.trace.store import TraceWriter, stored_ids

    options = options or RayOptions()
    ray = connect(options)
    t0 = time.perf_counter()
    folder = Path(out)
    if overwrite and folder.exists():
        for name in ("index.jsonl", "errors.jsonl", "meta.json"):
            (folder / name).unlink(missing_ok=True)
        for shard in (folder / "shards").glob("*.npz"):
            shard.unlink()
    done = stored_ids(folder)
    todo = [r for r in records if r.id not in done]
    summary = RunSummary(
        out=folder,
        n_input=len(records) + len(input_errors),
        n_already_done=len(records) - len(todo),
        n_traced=0,
    )
    errors = [e.to_dict() for e in input_errors]
    kwargs = {
        "model": model_kwargs(model, adapter, device, dtype, cache_dir),
        "config": config,
        "batch_size": options.batch_size,
        "threads": options.threads,
        "decode": decode,
    }
    writers: list[Any] = []

    def writer(identity_json: str) -> Any:
        if not writers:  # refuses another model or other settings, as the local engine does
            ident = json.loads(identity_json)
            got = ident["model"].get("fingerprint")
            if expect_fingerprint is not None and got != expect_fingerprint:
                raise ModelMismatchError(
                    f"the Ray actors loaded {ident['model'].get('spec')!r} with fingerprint {str(got)[:16]}, "
                    f"not the driver's model ({expect_fingerprint[:16]}): the same model spec must load the "
                    "same weights on every node",
                    field="model",
                )
            writers.append(TraceWriter(folder, kind="pair", model=ident["model"], settings=ident["settings"]))
        return writers[0]

    def on_batch(row: dict[str, Any]) -> None:
        w = writer(str(row["identity"]))
        traces = [t for t in pickle.loads(bytes(row["payload"])) if t.id not in w.done_ids]
        w.write(traces)
        summary.n_traced += len(traces)
        errors.extend(json.loads(row["errors"]))
        if on_error == "raise" and errors:
            e = errors[-1]
            raise InputError(
                f"line {e.get('line')}: {e.get('message')}", record=e.get("id"), field=e.get("field")
            )

    run = RunStats()
    try:
        if not todo and (folder / "meta.json").is_file():
            writer(probe(ray, TraceWorker, kwargs, options.cpus_per_worker, options.gpus_per_worker))
        chunks = [pickled(c) for c in chunked(todo, options.batch_size)]
        stream(ray, TraceWorker, kwargs, chunks, options, on_batch, "pairs (ray)", run)
    finally:
        if writers:
            writers[0].write_errors(errors, replace=True)
        summary.errors = errors
        summary.seconds = time.perf_counter() - t0
    if folder.is_dir():
        log_run(folder, {"job": "trace", **engine_record(options, ray, run, summary.seconds)})
    return summary


class RayTraceEngine:
    """Paired tracing on Ray actors, for a pipeline that holds its model in this process.

    One method, :meth:`trace`, with :func:`~mnemoscope.trace.pipeline.run_pairs` semantics: the
    same trace folder (``meta.json``, ``index.jsonl``, ``errors.jsonl``, ``shards/``), ids
    already there skipped, each record written exactly once even when an actor dies mid-run
    (Ray retries its batch, the driver re-submits what is still missing, the writer drops ids the
    folder holds), and traces equal to the in-process ones for the same batches (bit for bit at
    the same thread count; within float tolerance when the batches differ).

    The actors load the model themselves, from ``model``; :meth:`for_model` takes it from a
    loaded model and makes every actor prove it loaded the same weights (fingerprint).

    Example (what the calibration's tracing step does, with the actors instead of ``lm``)::

        engine = RayTraceEngine.for_model(lm, RayOptions(workers=2))
        engine.trace(records, out / "traces" / "pairs", ex_cfg.pair_config(), batch_size=c.batch_size)
    """

    def __init__(
        self,
        options: RayOptions | None = None,
        *,
        model: ModelLoader | None = None,
        fingerprint: str | None = None,
    ):
        self.options = options or RayOptions()
        self.model = model or ModelLoader()
        self.fingerprint = fingerprint

    @classmethod
    def for_model(
        cls, lm: Any, options: RayOptions | None = None, *, cache_dir: str | None = None
    ) -> RayTraceEngine:
        """An engine whose actors load ``lm``'s spec, adapter, device and dtype, and must find
        its fingerprint (the spec must name the same weights on every node)."""
        info = lm.info
        loader = ModelLoader(
            spec=str(info.spec),
            adapter=info.adapter,
            device=info.device,
            dtype=info.dtype,
            cache_dir=cache_dir,
        )
        return cls(options, model=loader, fingerprint=info.fingerprint)

    def trace(
        self,
        records: Sequence[Any],
        folder: str | Path,
        pair_config: Any,
        *,
        decode: str = "lockstep",
        batch_size: int | None = None,
        input_errors: Sequence[Any] = (),
        overwrite: bool = False,
        progress: bool = True,
    ) -> Any:
        """Trace ``records`` (each once) into the pair folder ``folder`` with ``pair_config``.

        Args:
            records: :class:`~mnemoscope.data.records.Record` (or ``PairItem``) objects, unique ids.
            folder: the trace folder (created; resumed when it exists with the same model and
                settings, refused with :class:`~mnemoscope.errors.TraceStoreError` otherwise).
            pair_config: the :class:`~mnemoscope.trace.pair.PairConfig` (stored in ``meta.json``).
            decode: ``"lockstep"`` (the calibration's and the audits' decoder) or
                ``"teacher-forced"``.
            batch_size: records per batch (the in-process batch; default the options').
            input_errors: rows of records the reader rejected, kept in ``errors.jsonl``.
            overwrite: start the folder afresh.
            progress: a progress bar over batches.

        Returns:
            The :class:`~mnemoscope.trace.pipeline.RunSummary` ``run_pairs`` returns.
        """
        options = dataclasses.replace(
            self.options, batch_size=batch_size or self.options.batch_size, progress=progress
        )
        return ray_run_pairs(
            records,
            folder,
            config=pair_config,
            model=self.model,
            input_errors=input_errors,
            overwrite=overwrite,
            options=options,
            decode=decode,
            expect_fingerprint=self.fingerprint,
        )

    def run(
        self, records: Sequence[Any], folder: Path, config: Any, *, overwrite: bool, progress: bool
    ) -> Any:
        """:class:`~mnemoscope.audit.tracing.PairEngine`: what a calibration's
        :class:`~mnemoscope.audit.tracing.LocalTracer` calls (``calibrate --engine ray``): the
        lockstep decoder, the options' batch size."""
        return self.trace(records, folder, config, overwrite=overwrite, progress=progress)


# -- repcs score ------------------------------------------------------------------------------------


def ray_score_file(
    calibration: str | Path,
    input_path: str | Path,
    out: str | Path,
    *,
    model: str | Callable[[Any], Any] = "default",
    adapter: str | None = None,
    device: str | None = None,
    dtype: str | None = None,
    cache_dir: str | None = None,
    on_error: str = "skip",
    options: RayOptions | None = None,
) -> dict[str, Any]:
    """:func:`~mnemoscope.pipelines.repcs.score_file` on a Ray cluster: the same output file
    (resumable: ids already in ``out`` are skipped), lines in completion order."""
    from mnemoscope.audit.results import ResultsFile
    from mnemoscope.data import read_records

    options = options or RayOptions()
    ray = connect(options)
    t0 = time.perf_counter()
    outp = Path(out)
    results = ResultsFile(outp)
    results.cut_torn_tail()
    done = results.done_ids
    n_done = len(done)
    records, input_errors = read_records(input_path, on_error=on_error)  # type: ignore[arg-type]
    bad = [e.to_dict() for e in input_errors]
    todo = [r for r in records if r.id not in done]
    kwargs = {
        "model": model_kwargs(model, adapter, device, dtype, cache_dir),
        "calibration": str(calibration),
        "batch_size": options.batch_size,
        "threads": options.threads,
    }
    n_ok = 0

    def on_batch(row: dict[str, Any]) -> None:
        nonlocal n_ok
        ids = json.loads(row["ids"])
        lines = bytes(row["payload"]).decode("utf-8").splitlines()
        keep = [x for x, i in zip(lines, ids, strict=True) if i not in done]
        results.append(keep)
        done.update(ids)
        n_ok += len(keep)
        failed = json.loads(row["errors"])
        bad.extend(failed)
        if on_error == "raise" and failed:
            e = failed[0]
            raise InputError(
                f"line {e.get('line')}: {e.get('message')}", record=e.get("id"), field=e.get("field")
            )

    run = RunStats()
    chunks = [pickled(c) for c in chunked(todo, options.batch_size)]
    stream(ray, ScoreWorker, kwargs, chunks, options, on_batch, "repcs score (ray)", run)
    return {
        "scored": n_ok,
        "already_done": n_done,
        "errors": bad,
        "out": str(outp),
        "engine": engine_record(options, ray, run, time.perf_counter() - t0),
    }
