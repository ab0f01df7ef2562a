"""The Ray engine: the local batch pipelines, fanned out over a Ray cluster with Ray Data.

``mnemoscope audit --input``, ``trace --input``, ``repcs score`` and ``bench run`` take
``--engine ray``; the work is the same, only where it runs changes:

* **The driver** (this process) reads and validates the input exactly as the local engine
  does (same line numbers, duplicate ids, per-record errors), skips the ids already in the
  output folder, and cuts the rest into the local engine's batches (``--batch-size``
  records each, in file order). One Ray Data row is one batch.
* **The actors** (``map_batches`` with a callable class, ``--workers`` of them, each with
  ``--cpus-per-worker`` CPUs / ``--gpus-per-worker`` GPUs) load the model and the profile
  once, then call the pipeline's own per-batch function on each batch:
  :func:`~mnemoscope.audit.auditor.audit_batch`,
  :func:`~mnemoscope.trace.pipeline.trace_batch`,
  :func:`~mnemoscope.pipelines.repcs.score_batch`. Same function, same batch: the same
  bytes as the local engine (see docs/ray.md for where padding could differ).
* **The driver** streams the finished batches back (``iter_batches``) and writes them the
  way the local engine does (``results.jsonl`` fsynced batch by batch, ``errors.jsonl``,
  ``meta.json``; a trace folder for ``trace``), plus ``results.parquet`` for audits. A batch
  is written once: Ray retries the batch of a killed actor (``max_restarts`` /
  ``max_task_retries``), and the driver drops a batch it has already written.

A folder written by one engine can be resumed by the other: ``meta.json`` holds the same
identity (model fingerprint, profile hash, settings) and a mismatch is refused. Ray is
imported lazily; without it the engine says, in one line, to install ``mnemoscope[ray]``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pickle
import socket
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mnemoscope.errors import InputError, MnemoscopeError

__all__ = [
    "RAY_EXTRA_HINT",
    "ModelLoader",
    "RayLeaderboardEngine",
    "RayOptions",
    "RayUnavailableError",
    "connect",
    "ray_audit_file",
    "ray_run_pairs",
    "ray_score_file",
    "write_results_parquet",
]

log = logging.getLogger(__name__)

RAY_EXTRA_HINT = "the Ray engine needs Ray Data: pip install 'mnemoscope[ray]'"


class RayUnavailableError(MnemoscopeError):
    """Ray is not installed, or the cluster at ``--ray-address`` cannot be reached."""


@dataclass(frozen=True)
class RayOptions:
    """Where and how wide a job runs.

    Attributes:
        address: ``None`` starts a local cluster on this machine (or joins the one already
            started in this process); ``"auto"`` joins the cluster ``ray start`` made on this
            node; ``"HOST:PORT"`` or ``"ray://HOST:PORT"`` a remote one.
        workers: actors (model replicas).
        cpus_per_worker: CPUs reserved per actor; also its torch/OpenMP thread count.
        gpus_per_worker: GPUs per actor (0 = CPU; 1 = one replica per GPU).
        batch_size: records per batch (the unit of work, of retry and of writing).
        max_retries: restarts of a dead actor, and retries of the batch it was running.
        progress: a progress bar over batches.
    """

    address: str | None = None
    workers: int = 1
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0
    batch_size: int = 8
    max_retries: int = 3
    progress: bool = True

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise InputError("must be >= 1", field="workers")
        if self.batch_size < 1:
            raise InputError("must be >= 1", field="batch_size")
        if self.cpus_per_worker <= 0 or self.gpus_per_worker < 0:
            raise InputError("cpus must be > 0 and gpus >= 0", field="cpus_per_worker")

    @property
    def threads(self) -> int:
        return max(1, int(self.cpus_per_worker))


# -- the cluster ------------------------------------------------------------------------------------


def _import_ray() -> Any:
    try:
        import ray
        import ray.data  # Ray Data is the part the engine needs
    except ImportError as e:
        raise RayUnavailableError(f"{RAY_EXTRA_HINT} ({e})") from None
    return ray


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise RayUnavailableError(f"--ray-address {address!r} is not HOST:PORT, ray://HOST:PORT or 'auto'")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        raise RayUnavailableError(
            f"cannot reach the Ray cluster at {address} ({e}); start one with `ray start --head` "
            "or leave out --ray-address for a local cluster"
        ) from None


def connect(options: RayOptions) -> Any:
    """Join (or start) the cluster; returns the ``ray`` module. Fails fast on a dead address."""
    ray = _import_ray()
    local = options.address in (None, "", "local")
    if options.address and not local and options.address != "auto":
        _check_reachable(options.address)  # before anything else: a dead address fails in seconds
    if ray.is_initialized():
        return ray
    env = {"TOKENIZERS_PARALLELISM": "false"}
    if local:
        ray.init(
            include_dashboard=False,
            log_to_driver=options.progress,
            logging_level=logging.INFO if options.progress else logging.WARNING,
            runtime_env={"env_vars": env},
        )
        return ray
    try:
        ray.init(address=options.address, log_to_driver=options.progress, runtime_env={"env_vars": env})
    except ConnectionError as e:
        raise RayUnavailableError(f"cannot join the Ray cluster at {options.address}: {e}") from None
    return ray


# -- actors -----------------------------------------------------------------------------------------


def _set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def _load_lm(model: dict[str, Any]) -> Any:
    """A model spec (the CLI's flags), or a loader function (``bench run``'s siblings)."""
    from mnemoscope.models import load_model

    if callable(model["model"]):
        return model["model"](None)

    return load_model(
        model["model"],
        adapter=model.get("adapter"),
        device=model.get("device"),
        dtype=model.get("dtype"),
        cache_dir=model.get("cache_dir"),
    )


def _out(chunk: int, ids: list[str], payload: bytes, errors: list[dict[str, Any]], identity: str) -> Any:
    return {
        "chunk": chunk,
        "ids": json.dumps(ids),
        "payload": payload,
        "errors": json.dumps(errors, ensure_ascii=False, default=str),
        "identity": identity,
        "pid": os.getpid(),
    }


def _rows_out(rows: list[dict[str, Any]]) -> dict[str, Any]:
    import numpy as np

    cols = ("chunk", "ids", "payload", "errors", "identity", "pid")
    out: dict[str, Any] = {c: [r[c] for r in rows] for c in cols}
    out["chunk"] = np.asarray(out["chunk"], dtype=np.int64)
    out["pid"] = np.asarray(out["pid"], dtype=np.int64)
    out["payload"] = np.asarray(out["payload"], dtype=object)
    for c in ("ids", "errors", "identity"):
        out[c] = np.asarray(out[c], dtype=object)
    return out


class AuditWorker:
    """One actor: a loaded :class:`~mnemoscope.audit.auditor.Auditor`, reused for every batch."""

    def __init__(self, model: dict[str, Any], auditor: dict[str, Any], threads: int):
        _set_threads(threads)
        from mnemoscope.audit.auditor import Auditor

        lm = _load_lm(model)
        self.auditor = Auditor.for_model(lm, auditor.pop("profile", None), **auditor)
        self.identity = json.dumps(self.auditor.identity, default=str)  # key order kept: same meta.json

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        from mnemoscope.audit.auditor import AuditRequest, audit_batch

        rows = []
        for chunk, records in zip(batch["chunk"], batch["records"], strict=True):
            items = [(int(line), AuditRequest(**req)) for line, req in json.loads(records)]
            lines, errors = audit_batch(self.auditor, items)
            ids = [str(json.loads(x)["id"]) for x in lines]
            payload = "".join(x + "\n" for x in lines).encode("utf-8")
            rows.append(_out(int(chunk), ids, payload, errors, self.identity))
        return _rows_out(rows)


class TraceWorker:
    """One actor: a loaded model and a :class:`~mnemoscope.trace.tracer.Tracer` for paired traces."""

    def __init__(self, model: dict[str, Any], config: Any, batch_size: int, threads: int):
        _set_threads(threads)
        from mnemoscope.trace.tracer import Tracer

        self.lm = _load_lm(model)
        self.tracer = Tracer(self.lm, batch_size=batch_size)
        # a PairConfig, or a function of the loaded model (``--chat auto`` needs the tokenizer)
        self.config = config(self.lm) if callable(config) else config
        self.identity = json.dumps({"model": self.lm.info.to_dict(), "settings": self.config.to_dict()})

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        from mnemoscope.errors import InputError
        from mnemoscope.trace.pair import prepare_pair
        from mnemoscope.trace.pipeline import trace_batch

        rows = []
        for chunk, records in zip(batch["chunk"], batch["records"], strict=True):
            prepared, errors = [], []
            for r in pickle.loads(records):
                try:
                    prepared.append(prepare_pair(self.tracer, r, self.config))
                except InputError as e:
                    errors.append({"line": r.line, "id": r.id, "field": e.field, "message": e.reason})
            traces, failed = trace_batch(self.tracer, prepared, self.config) if prepared else ([], [])
            errors.extend(failed)
            # pickle: between this job's own processes only (never user input)
            payload = pickle.dumps(traces, protocol=pickle.HIGHEST_PROTOCOL)
            rows.append(_out(int(chunk), [t.id for t in traces], payload, errors, self.identity))
        return _rows_out(rows)


class ScoreWorker:
    """One actor: a loaded model and a RePCS calibration (``repcs score``)."""

    def __init__(self, model: dict[str, Any], calibration: str, batch_size: int, threads: int):
        _set_threads(threads)
        from mnemoscope.pipelines.repcs import load_calibration, score_config
        from mnemoscope.trace.tracer import Tracer

        self.lm = _load_lm(model)
        self.det, meta = load_calibration(calibration, self.lm.info)
        self.config = score_config(meta)
        self.tracer = Tracer(self.lm, batch_size=batch_size)
        self.identity = json.dumps(
            {"model": self.lm.info.fingerprint, "calibration": meta}, sort_keys=True, default=str
        )

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        from mnemoscope.pipelines.repcs import score_batch

        rows = []
        for chunk, records in zip(batch["chunk"], batch["records"], strict=True):
            lines, errors = score_batch(self.tracer, self.det, pickle.loads(records), self.config)
            ids = [str(json.loads(x)["id"]) for x in lines]
            payload = "".join(x + "\n" for x in lines).encode("utf-8")
            rows.append(_out(int(chunk), ids, payload, errors, self.identity))
        return _rows_out(rows)


def _probe(ray: Any, worker: type, kwargs: dict[str, Any], options: RayOptions) -> str:
    """A worker's identity without running a batch (a resumed folder with nothing left to do)."""

    def identity() -> str:
        return str(worker(**kwargs).identity)

    fn = ray.remote(num_cpus=options.cpus_per_worker, num_gpus=options.gpus_per_worker)(identity)
    return str(ray.get(fn.remote()))


# -- the driver -------------------------------------------------------------------------------------


@dataclass
class _Run:
    """What the driver saw: batches written, duplicates dropped, which actor did what."""

    written_chunks: set[int] = dataclasses.field(default_factory=set)
    duplicates: int = 0
    started: float = dataclasses.field(default_factory=time.perf_counter)
    first_batch_seconds: float | None = None  # actor start-up + model load + one batch
    first_batch_records: int = 0
    per_pid: dict[int, int] = dataclasses.field(default_factory=dict)
    n_ok: int = 0


def _stream(
    ray: Any,
    worker: type,
    kwargs: dict[str, Any],
    chunks: Sequence[list[Any] | bytes],
    options: RayOptions,
    on_batch: Callable[[dict[str, Any]], None],
    desc: str,
    run: _Run,
) -> _Run:
    """Run ``worker`` over ``chunks`` (one Ray Data row each) and hand each finished batch to
    ``on_batch`` exactly once, in completion order."""
    from tqdm.auto import tqdm

    if not chunks:
        return run
    if not options.progress:
        logging.getLogger("ray.data").setLevel(logging.WARNING)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False  # ours counts batches of records
    ctx.execution_options.preserve_order = False
    items = [
        {"chunk": i, "records": c if isinstance(c, bytes) else json.dumps(c, ensure_ascii=False)}
        for i, c in enumerate(chunks)
    ]
    env = {
        "OMP_NUM_THREADS": str(options.threads),
        "MKL_NUM_THREADS": str(options.threads),
        "TOKENIZERS_PARALLELISM": "false",
    }
    with warnings.catch_warnings():
        # max_restarts/max_task_retries have no named parameter yet in Ray 2.60 (its default is to
        # retry forever, which a record that always kills its actor would do): pass them anyway.
        warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated", category=Warning)
        ds = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
            worker,
            fn_constructor_kwargs=kwargs,
            batch_size=1,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=min(options.workers, len(chunks))),
            num_cpus=options.cpus_per_worker,
            num_gpus=options.gpus_per_worker or None,
            runtime_env={"env_vars": env},
            max_restarts=options.max_retries,
            max_task_retries=options.max_retries,
        )
    with tqdm(total=len(chunks), desc=desc, unit="batch", disable=not options.progress) as bar:
        for block in ds.iter_batches(batch_size=None, batch_format="numpy", prefetch_batches=0):
            for i in range(len(block["chunk"])):
                row = {k: block[k][i] for k in block}
                chunk = int(row["chunk"])
                if chunk in run.written_chunks:
                    run.duplicates += 1
                    continue
                on_batch(row)
                if run.first_batch_seconds is None:
                    run.first_batch_seconds = round(time.perf_counter() - run.started, 3)
                    run.first_batch_records = len(chunks[chunk]) if isinstance(chunks[chunk], list) else 0
                run.written_chunks.add(chunk)
                pid = int(row["pid"])
                run.per_pid[pid] = run.per_pid.get(pid, 0) + 1
                bar.update(1)
    return run


def _pickled(records: list[Any]) -> bytes:
    # records of our own classes (Record, PairItem), between this job's own processes only
    return pickle.dumps(records, protocol=pickle.HIGHEST_PROTOCOL)


def _chunks(items: Sequence[Any], size: int) -> list[list[Any]]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def _log_run(out: Path, record: dict[str, Any]) -> None:
    with (out / "runs.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps(record, default=str) + "\n")


def _model_kwargs(
    model: str | Callable[[Any], Any],
    adapter: str | None,
    device: str | None,
    dtype: str | None,
    cache_dir: str | None,
) -> dict[str, Any]:
    return {"model": model, "adapter": adapter, "device": device, "dtype": dtype, "cache_dir": cache_dir}


def _engine_record(options: RayOptions, ray: Any, run: _Run, seconds: float) -> dict[str, Any]:
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
        "duplicate_batches_dropped": run.duplicates,
        "first_batch_seconds": run.first_batch_seconds,
        "first_batch_records": run.first_batch_records,
        "seconds": round(seconds, 3),
        "finished": time.time(),
    }


# -- audit --------------------------------------------------------------------------------------------


def _audit_inputs(path: Path) -> Iterable[tuple[int, Any]]:
    """JSONL lines, or Parquet rows turned into JSON lines: both go through the local reader's checks."""
    from mnemoscope.audit.auditor import parse_audit_lines, read_audit_inputs

    if path.suffix.lower() not in (".parquet", ".pq"):
        return read_audit_inputs(path)
    import pyarrow.parquet as pq

    def lines() -> Iterable[bytes]:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=4096):
            for row in batch.to_pylist():
                clean = {k: v for k, v in row.items() if v is not None or k == "id"}
                yield json.dumps(clean, ensure_ascii=False, default=str).encode("utf-8")

    return parse_audit_lines(lines())


_PARQUET_SCALARS = ("id", "source", "p_memory", "answer", "summary", "rule", "n_steps", "identical_prompts")
_PARQUET_JSON = ("evidence", "guarantee", "tokens", "spans", "repcs", "crm", "notes")


def write_results_parquet(results_jsonl: Path, dest: Path) -> int:
    """``results.jsonl`` as Parquet: the top-level scalars as columns, nested fields as JSON text
    (one fixed schema whatever the records hold). Returns the number of rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols: dict[str, list[Any]] = {c: [] for c in (*_PARQUET_SCALARS, *_PARQUET_JSON)}
    if results_jsonl.is_file():
        with results_jsonl.open(encoding="utf-8") as f:
            for line in f:
                try:
                    d = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn last line: redone on resume
                for c in _PARQUET_SCALARS:
                    cols[c].append(d.get(c))
                for c in _PARQUET_JSON:
                    cols[c].append(json.dumps(d.get(c), ensure_ascii=False))
    schema = pa.schema(
        [
            ("id", pa.string()),
            ("source", pa.string()),
            ("p_memory", pa.float64()),
            ("answer", pa.string()),
            ("summary", pa.string()),
            ("rule", pa.string()),
            ("n_steps", pa.int64()),
            ("identical_prompts", pa.bool_()),
            *[(c, pa.string()) for c in _PARQUET_JSON],
        ]
    )
    table = pa.table({c: cols[c] for c in schema.names}, schema=schema)
    tmp = dest.with_name(f".{dest.name}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, dest)
    return table.num_rows


def ray_audit_file(
    input_path: str | Path,
    out_dir: str | Path,
    *,
    model: str = "default",
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
) -> dict[str, Any]:
    """:func:`~mnemoscope.audit.auditor.run_audit_file` on a Ray cluster (same folder, same lines).

    ``input_path`` is JSONL or Parquet (``.parquet``: one row per record, same fields).
    Returns the local engine's summary plus ``engine`` (the Ray settings and who did what).
    """
    from mnemoscope.audit.auditor import input_error_row, note_outcomes
    from mnemoscope.audit.results import EarlyStop, ResultsFolder

    options = options or RayOptions()
    ray = connect(options)
    t0 = time.perf_counter()
    out = Path(out_dir)
    folder = ResultsFolder(out, None, overwrite=overwrite, extra_files=("results.parquet",))
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
        "model": _model_kwargs(model, adapter, device, dtype, cache_dir),
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

    run = _Run()
    if not todo and (out / "meta.json").is_file():
        check(_probe(ray, AuditWorker, kwargs, options))
    try:
        _stream(
            ray, AuditWorker, kwargs, _chunks(todo, options.batch_size), options, on_batch, "audit (ray)", run
        )
    finally:
        folder.write_errors(errors)
    if parquet:
        write_results_parquet(results_path, out / "results.parquet")
    engine = _engine_record(options, ray, run, time.perf_counter() - t0)
    _log_run(out, {"job": "audit", "input": str(input_path), **engine})
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


# -- trace ------------------------------------------------------------------------------------------


def _read_index_ids(folder: Path) -> set[str]:
    ids: set[str] = set()
    index = folder / "index.jsonl"
    if index.is_file():
        for line in index.read_text(encoding="utf-8").splitlines():
            try:
                ids.add(str(json.loads(line)["id"]))
            except (json.JSONDecodeError, KeyError, TypeError):
                continue  # a torn last line: that record is redone
    return ids


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
) -> Any:
    """:func:`~mnemoscope.trace.pipeline.run_pairs` on a Ray cluster: the same trace folder.

    ``config`` is a :class:`~mnemoscope.trace.pair.PairConfig` or a picklable function of the
    loaded model returning one (settings decided by the model, e.g. its chat template).

    The folder's ``meta.json`` is written from the first actor's model identity, so a resumed
    folder of another model or other settings is refused (:class:`TraceStoreError`) before any
    trace is written. Returns the local :class:`~mnemoscope.trace.pipeline.RunSummary`.
    """
    from mnemoscope.trace.pipeline import RunSummary
    from mnemoscope.trace.store import TraceWriter

    options = options or RayOptions()
    ray = connect(options)
    t0 = time.perf_counter()
    folder = Path(out)
    if overwrite and folder.exists():
        for name in ("index.jsonl", "errors.jsonl", "meta.json"):
            (folder / name).unlink(missing_ok=True)
        for shard in (folder / "shards").glob("*.npz"):
            shard.unlink()
    done = _read_index_ids(folder)
    todo = [r for r in records if r.id not in done]
    summary = RunSummary(
        out=folder,
        n_input=len(records) + len(input_errors),
        n_already_done=len(records) - len(todo),
        n_traced=0,
    )
    errors = [e.to_dict() for e in input_errors]
    kwargs = {
        "model": _model_kwargs(model, adapter, device, dtype, cache_dir),
        "config": config,
        "batch_size": options.batch_size,
        "threads": options.threads,
    }
    writers: list[Any] = []

    def writer(identity_json: str) -> Any:
        if not writers:  # refuses another model or other settings, as the local engine does
            ident = json.loads(identity_json)
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

    run = _Run()
    try:
        if not todo and (folder / "meta.json").is_file():
            writer(_probe(ray, TraceWorker, kwargs, options))
        chunks = [_pickled(c) for c in _chunks(todo, options.batch_size)]
        _stream(ray, TraceWorker, kwargs, chunks, options, on_batch, "pairs (ray)", run)
    finally:
        if writers:
            writers[0].write_errors(errors, replace=True)
        summary.errors = errors
        summary.seconds = time.perf_counter() - t0
    if folder.is_dir():
        _log_run(folder, {"job": "trace", **_engine_record(options, ray, run, summary.seconds)})
    return summary


# -- repcs score ------------------------------------------------------------------------------------


def ray_score_file(
    calibration: str | Path,
    input_path: str | Path,
    out: str | Path,
    *,
    model: str = "default",
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
        "model": _model_kwargs(model, adapter, device, dtype, cache_dir),
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

    run = _Run()
    chunks = [_pickled(c) for c in _chunks(todo, options.batch_size)]
    _stream(ray, ScoreWorker, kwargs, chunks, options, on_batch, "repcs score (ray)", run)
    return {
        "scored": n_ok,
        "already_done": n_done,
        "errors": bad,
        "out": str(outp),
        "engine": _engine_record(options, ray, run, time.perf_counter() - t0),
    }


# -- bench run (the leaderboard) ---------------------------------------------------------------------


class TokenStatsWorker:
    """One actor: a loaded sibling model computing the leaderboard's token statistics."""

    def __init__(self, model: dict[str, Any], batch_size: int, threads: int):
        _set_threads(threads)
        from mnemoscope.trace.tracer import Tracer

        self.lm = _load_lm(model)
        self.tracer = Tracer(self.lm, batch_size=batch_size)
        self.identity = json.dumps(self.lm.info.to_dict(), default=str)

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        from mnemoscope.pipelines.leaderboard import token_stats_batch

        rows = []
        for chunk, texts in zip(batch["chunk"], batch["records"], strict=True):
            stats = token_stats_batch(self.tracer, json.loads(texts))
            rows.append(_out(int(chunk), [], pickle.dumps(stats), [], self.identity))
        return _rows_out(rows)


@dataclass(frozen=True)
class ModelLoader:
    """A picklable ``loader(None) -> LoadedModel`` for a model spec (what actors call)."""

    spec: str = "default"
    adapter: str | None = None
    device: str | None = None
    dtype: str | None = None
    cache_dir: str | None = None

    def __call__(self, _: Any = None) -> Any:
        from mnemoscope.models import load_model

        return load_model(
            self.spec, adapter=self.adapter, device=self.device, dtype=self.dtype, cache_dir=self.cache_dir
        )


class RayLeaderboardEngine:
    """The ``engine`` of :func:`~mnemoscope.pipelines.leaderboard.run_leaderboard` on Ray.

    Each sibling's forward passes (token statistics, paired traces) run on actors that call the
    sibling's loader themselves; the statistics, cross-validation and the report stay in the
    driver, unchanged. Batches are the local ones (``batch_size`` documents in order), so the
    scores are the local scores.
    """

    def __init__(self, options: RayOptions | None = None):
        self.options = options or RayOptions()

    def token_stats(self, load: Callable[[Any], Any], texts: Sequence[str], *, batch_size: int) -> list[Any]:
        ray = connect(self.options)
        options = dataclasses.replace(self.options, batch_size=batch_size)
        chunks = _chunks(list(texts), batch_size)
        got: dict[int, list[Any]] = {}

        def on_batch(row: dict[str, Any]) -> None:
            got[int(row["chunk"])] = pickle.loads(bytes(row["payload"]))

        kwargs = {"model": {"model": load}, "batch_size": batch_size, "threads": options.threads}
        _stream(ray, TokenStatsWorker, kwargs, chunks, options, on_batch, "token stats (ray)", _Run())
        return [s for i in range(len(chunks)) for s in got[i]]

    def run_pairs(
        self, load: Callable[[Any], Any], items: Sequence[Any], folder: Path, *, config: Any, batch_size: int
    ) -> Any:
        options = dataclasses.replace(self.options, batch_size=batch_size)
        return ray_run_pairs(items, folder, config=config, model=load, options=options)
