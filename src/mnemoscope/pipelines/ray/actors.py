"""The actors: one loaded model each, reused for every batch Ray Data hands them.

Each worker's ``__call__`` runs the local engine's own per-batch function on one batch (one Ray
Data row) and returns one output row: the batch number, the ids it produced, the payload (result
lines, or pickled traces), the per-record error rows, the worker's identity (what the driver
checks against the output folder) and its pid (who did what, in ``runs.jsonl``).
"""

from __future__ import annotations

import json
import os
import pickle
import time
from dataclasses import dataclass
from typing import Any

__all__ = [
    "AuditWorker",
    "ModelLoader",
    "ScoreWorker",
    "TokenStatsWorker",
    "TraceWorker",
    "probe",
]


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


def _out(
    chunk: int, ids: list[str], payload: bytes, errors: list[dict[str, Any]], identity: str, started: float
) -> Any:
    return {
        "chunk": chunk,
        "ids": json.dumps(ids),
        "payload": payload,
        "errors": json.dumps(errors, ensure_ascii=False, default=str),
        "identity": identity,
        "pid": os.getpid(),
        "seconds": time.perf_counter() - started,  # this batch's own work, what a worker's rate is made of
    }


def _rows_out(rows: list[dict[str, Any]]) -> dict[str, Any]:
    import numpy as np

    cols = ("chunk", "ids", "payload", "errors", "identity", "pid", "seconds")
    out: dict[str, Any] = {c: [r[c] for r in rows] for c in cols}
    out["seconds"] = np.asarray(out["seconds"], dtype=np.float64)
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
            started = time.perf_counter()
            items = [(int(line), AuditRequest(**req)) for line, req in json.loads(records)]
            lines, errors = audit_batch(self.auditor, items)
            ids = [str(json.loads(x)["id"]) for x in lines]
            payload = "".join(x + "\n" for x in lines).encode("utf-8")
            rows.append(_out(int(chunk), ids, payload, errors, self.identity, started))
        return _rows_out(rows)


class TraceWorker:
    """One actor: a loaded model and a :class:`~mnemoscope.trace.tracer.Tracer` for paired traces.

    ``decode`` is :data:`~mnemoscope.trace.pipeline.Decode`: ``"lockstep"`` is the audits' and
    the calibration's decoder, ``"teacher-forced"`` the default of ``mnemoscope trace``.
    """

    def __init__(
        self,
        model: dict[str, Any],
        config: Any,
        batch_size: int,
        threads: int,
        decode: str = "teacher-forced",
    ):
        _set_threads(threads)
        from mnemoscope.trace.tracer import Tracer

        self.lm = _load_lm(model)
        self.tracer = Tracer(self.lm, batch_size=batch_size)
        self.decode = decode
        # a PairConfig, or a function of the loaded model (``--chat auto`` needs the tokenizer)
        self.config = config(self.lm) if callable(config) else config
        self.identity = json.dumps({"model": self.lm.info.to_dict(), "settings": self.config.to_dict()})

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        from mnemoscope.errors import InputError
        from mnemoscope.trace.pair import prepare_pair
        from mnemoscope.trace.pipeline import trace_batch

        rows = []
        for chunk, records in zip(batch["chunk"], batch["records"], strict=True):
            started = time.perf_counter()
            prepared, errors = [], []
            for r in pickle.loads(records):
                try:
                    prepared.append(prepare_pair(self.tracer, r, self.config))
                except InputError as e:
                    errors.append({"line": r.line, "id": r.id, "field": e.field, "message": e.reason})
            traces, failed = (
                trace_batch(self.tracer, prepared, self.config, decode=self.decode)  # type: ignore[arg-type]
                if prepared
                else ([], [])
            )
            errors.extend(failed)
            # pickle: between this job's own processes only (never user input)
            payload = pickle.dumps(traces, protocol=pickle.HIGHEST_PROTOCOL)
            rows.append(_out(int(chunk), [t.id for t in traces], payload, errors, self.identity, started))
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
            started = time.perf_counter()
            lines, errors = score_batch(self.tracer, self.det, pickle.loads(records), self.config)
            ids = [str(json.loads(x)["id"]) for x in lines]
            payload = "".join(x + "\n" for x in lines).encode("utf-8")
            rows.append(_out(int(chunk), ids, payload, errors, self.identity, started))
        return _rows_out(rows)


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
            started = time.perf_counter()
            stats = token_stats_batch(self.tracer, json.loads(texts))
            rows.append(_out(int(chunk), [], pickle.dumps(stats), [], self.identity, started))
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


def probe(ray: Any, worker: type, kwargs: dict[str, Any], cpus: float, gpus: float) -> str:
    """A worker's identity without running a batch (a resumed folder with nothing left to do)."""

    def identity() -> str:
        return str(worker(**kwargs).identity)

    fn = ray.remote(num_cpus=cpus, num_gpus=gpus)(identity)
    return str(ray.get(fn.remote()))
