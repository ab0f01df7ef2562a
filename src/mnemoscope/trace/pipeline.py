"""Batch paired tracing into a trace folder: resumable, incremental, bad records isolated."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tqdm.auto import tqdm

from mnemoscope.data.records import Record, RecordError
from mnemoscope.errors import InputError
from mnemoscope.models.loader import LoadedModel
from mnemoscope.trace.lockstep import trace_lockstep
from mnemoscope.trace.pair import PairConfig, PairLike, PreparedPair, prepare_pair, trace_prepared
from mnemoscope.trace.store import TraceWriter
from mnemoscope.trace.tracer import Tracer, batch_ranges

__all__ = ["Decode", "RunSummary", "run_pairs", "trace_batch"]

#: how a pair is traced: ``teacher-forced`` (generate, then one full forward per path:
#: :func:`~mnemoscope.trace.pair.trace_prepared`) or ``lockstep`` (both paths and the closed-book
#: answer decoded together, the audit's decoder: :func:`~mnemoscope.trace.lockstep.trace_lockstep`);
#: the traces agree to float tolerance
Decode = Literal["teacher-forced", "lockstep"]

log = logging.getLogger(__name__)


@dataclass
class RunSummary:
    """What a batch run did."""

    out: Path
    n_input: int
    n_already_done: int
    n_traced: int
    errors: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def n_errors(self) -> int:
        return len(self.errors)

    def to_dict(self) -> dict[str, Any]:
        return {
            "out": str(self.out),
            "n_input": self.n_input,
            "n_already_done": self.n_already_done,
            "n_traced": self.n_traced,
            "n_errors": self.n_errors,
            "seconds": round(self.seconds, 3),
        }


def trace_batch(
    tracer: Tracer,
    batch: Sequence[PreparedPair],
    config: PairConfig,
    *,
    on_error: Literal["skip", "raise"] = "skip",
    decode: Decode = "teacher-forced",
) -> tuple[list[Any], list[dict[str, Any]]]:
    """Trace one batch of prepared pairs: ``(traces, error rows)``.

    The per-batch step of :func:`run_pairs` (the Ray engine's actors call it too). If the
    batch fails as a whole, its records are retried one by one so that one bad record does
    not take the batch down.
    """
    errors: list[dict[str, Any]] = []
    trace = trace_lockstep if decode == "lockstep" else trace_prepared
    try:
        traces = trace(tracer, batch, config)
    except (RuntimeError, ValueError, IndexError) as e:
        log.warning("batch failed (%s); retrying its %d records one by one", e, len(batch))
        traces = []
        for p in batch:
            try:
                traces.extend(trace(tracer, [p], config))
            except (RuntimeError, ValueError, IndexError) as e1:
                if on_error == "raise":
                    raise
                errors.append(
                    {
                        "line": getattr(p.item, "line", None),
                        "id": p.item.id,
                        "field": None,
                        "message": f"{type(e1).__name__}: {e1}",
                    }
                )
    return list(traces), errors


def run_pairs(
    lm: LoadedModel,
    records: Sequence[Record] | Sequence[PairLike],
    out: str | Path,
    *,
    config: PairConfig,
    batch_size: int = 8,
    input_errors: Sequence[RecordError] = (),
    on_error: Literal["skip", "raise"] = "skip",
    overwrite: bool = False,
    progress: bool = True,
    decode: Decode = "teacher-forced",
) -> RunSummary:
    """Trace ``records`` as pairs into ``out``; records already in ``out`` are skipped.

    Each batch is written as soon as it is traced. A record that cannot be traced
    (too long for the model, empty query, ...) goes to ``errors.jsonl`` with its line,
    id, field and reason; with ``on_error="raise"`` the run stops there instead (what
    was written stays written). If a whole batch fails for another reason, its records
    are retried one by one so that one bad record does not take the batch down.
    ``decode``: :data:`Decode` (not part of the folder's settings: both give the same traces).
    """
    t0 = time.perf_counter()
    writer = TraceWriter(
        out, kind="pair", model=lm.info.to_dict(), settings=config.to_dict(), overwrite=overwrite
    )
    tracer = Tracer(lm, batch_size=batch_size)
    summary = RunSummary(
        out=Path(out), n_input=len(records) + len(input_errors), n_already_done=0, n_traced=0
    )
    errors = [e.to_dict() for e in input_errors]

    todo = [r for r in records if r.id not in writer.done_ids]
    summary.n_already_done = len(records) - len(todo)
    prepared: list[PreparedPair] = []
    for r in todo:
        try:
            prepared.append(prepare_pair(tracer, r, config))
        except InputError as e:
            if on_error == "raise":
                raise InputError(f"line {getattr(r, 'line', None)}: {e}") from e
            errors.append(
                {"line": getattr(r, "line", None), "id": r.id, "field": e.field, "message": e.reason}
            )

    bar = tqdm(total=len(prepared), desc="pairs", unit="pair", disable=not progress or not prepared)
    try:
        for idx in batch_ranges(len(prepared), batch_size):
            batch = [prepared[i] for i in idx]
            traces, failed = trace_batch(tracer, batch, config, on_error=on_error, decode=decode)
            errors.extend(failed)
            writer.write(traces)
            summary.n_traced += len(traces)
            bar.update(len(batch))
    finally:
        bar.close()
        writer.write_errors(errors, replace=True)
        summary.errors = errors
        summary.seconds = time.perf_counter() - t0
    return summary
