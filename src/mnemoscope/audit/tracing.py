"""Tracing for a calibration: the one step in which calibrating in process and over an endpoint differ.

:func:`mnemoscope.audit.calibrate.calibrate` is one pipeline (draw, trace, verify the labels,
split by fact, fit, certify, validate, write the card); it reaches the model only through a
:class:`CalibrationTracer`:

* :class:`LocalTracer`: the model in this process. Each record is traced once, both paths and
  the closed-book answer decoded together in padded batches (:mod:`mnemoscope.trace.lockstep`,
  the audits' own decoder), by a :class:`PairEngine`. Hidden states are traced only when a
  :class:`~mnemoscope.audit.calibrate.SignalFitter` reads them (CRM): the default verdict's
  signals are black-box.
* :class:`EndpointTracer`: a model behind an OpenAI-compatible server
  (:func:`trace_with_closed_book`: completions with log-probs, plus one greedy generation per
  record for the closed-book answer). No hidden states come back over HTTP.

**The engine seam (Ray).** :class:`LocalTracer` does not decode itself: its ``engine`` (a
:class:`PairEngine`) traces the records not yet in the pair folder and appends them there
(:class:`~mnemoscope.trace.store.TraceWriter`'s done ids make every run resumable).
:class:`LocalEngine` is :func:`mnemoscope.trace.pipeline.run_pairs` in this process; an engine
that spreads the same batches over Ray workers (``--engine ray``, a later change) plugs in by
implementing :meth:`PairEngine.run`, and nothing else in the calibration changes.

This module also holds what tracing many records over an endpoint needs elsewhere
(:func:`trace_records`, used by ``repcs`` over an endpoint) and the served model's identity
(:func:`endpoint_model_info`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from mnemoscope.audit.profile import BLACK_BOX_SIGNALS, ENDPOINT_PROFILE_FORMAT, PROFILE_FORMAT
from mnemoscope.audit.results import EarlyStop
from mnemoscope.errors import InputError, MnemoscopeError
from mnemoscope.trace.types import PairTrace

__all__ = [
    "CalibrationTracer",
    "CalibrationTraces",
    "EndpointTracer",
    "LocalEngine",
    "LocalTracer",
    "PairEngine",
    "TracedRecords",
    "endpoint_model_info",
    "trace_records",
    "trace_with_closed_book",
]

log = logging.getLogger(__name__)

Answers = dict[str, tuple[str, str | None]]


@dataclass
class CalibrationTraces:
    """What a calibration reads of its traces, in the folder's order.

    Attributes:
        traces: one per traced record; ``answer_without`` holds the record's closed-book answer
            (greedy, no context), which label verification and ``closed_book_agreement`` read.
        pieces: the text each answer token adds (the tokenizer's in process, the server's over
            an endpoint).
        records: the input record of each trace.
        failures: ``{id, line, message}`` per record that could not be traced.
        seconds: wall seconds spent tracing in this run (reused traces cost none).
    """

    traces: list[PairTrace] = field(default_factory=list)
    pieces: list[list[str]] = field(default_factory=list)
    records: list[Any] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0


class CalibrationTracer(Protocol):
    """The model access of a calibration (module doc). ``open`` is called once, before any other
    method, with the calibration's settings and whether a fitter reads hidden states."""

    #: ``"local"`` or ``"endpoint"``: the profile's backend
    backend: str
    #: the signals this backend can measure (the verdict may combine only these)
    signals: tuple[str, ...]

    def open(self, config: Any, *, hidden: bool, folder: Path, overwrite: bool) -> None: ...

    def model_info(self) -> dict[str, Any]: ...

    def done_ids(self, folder: Path) -> set[str]:
        """The ids ``folder`` already holds traces of (a resumed run does not trace them again)."""
        ...

    def header(self) -> dict[str, Any]:
        """The pair settings for the profile header (format, backend, model, prompt, T, layout,
        and what the backend adds)."""
        ...

    def answers(self, records: Sequence[Any], folder: Path, *, overwrite: bool, progress: bool) -> Answers:
        """Trace ``records`` not yet in ``folder``; ``{id: (answer, closed-book answer)}`` of them
        (what the per-class draw reads after each round)."""
        ...

    def trace(
        self, records: Sequence[Any], folder: Path, *, overwrite: bool, progress: bool
    ) -> CalibrationTraces:
        """Trace ``records`` not yet in ``folder`` (resumable) and return every one of them traced."""
        ...

    def repcs(self, config: Any) -> Any:
        """An unfitted RePCS detector with this backend's estimator of Z."""
        ...

    def repcs_record(self, repcs: Any) -> dict[str, Any]: ...

    def load_profile(self, out: Path) -> Any: ...

    def auditor(self, profile: Any) -> Any:
        """An :class:`~mnemoscope.audit.auditor.Auditor` of this model with ``profile``, one
        request at a time (what the card's audit time measures)."""
        ...


# -- in process -------------------------------------------------------------------------------------


class PairEngine(Protocol):
    """Traces records into a pair folder: the records already there are skipped, each batch is
    appended as soon as it is traced (:class:`~mnemoscope.trace.store.TraceWriter`), and
    records that cannot be traced are listed in the summary's ``errors``."""

    def run(
        self, records: Sequence[Any], folder: Path, config: Any, *, overwrite: bool, progress: bool
    ) -> Any:
        """Trace ``records`` with ``config`` (a :class:`~mnemoscope.trace.pair.PairConfig`) into
        ``folder``; a :class:`~mnemoscope.trace.pipeline.RunSummary`."""
        ...


@dataclass
class LocalEngine:
    """:func:`~mnemoscope.trace.pipeline.run_pairs` in this process, lockstep decoding
    (``batch_size`` records, three rows each: both paths and the closed-book answer)."""

    lm: Any
    batch_size: int = 16

    def run(
        self, records: Sequence[Any], folder: Path, config: Any, *, overwrite: bool, progress: bool
    ) -> Any:
        from mnemoscope.trace.pipeline import run_pairs

        return run_pairs(
            self.lm,
            records,
            folder,
            config=config,
            batch_size=self.batch_size,
            overwrite=overwrite,
            progress=progress,
            decode="lockstep",
        )


def _stored_hidden(folder: Path) -> bool | None:
    """Whether the pair folder a resumed calibration finds holds hidden states (``None``: no
    folder yet)."""
    meta = folder / "meta.json"
    if not meta.is_file():
        return None
    try:
        settings = json.loads(meta.read_text()).get("settings") or {}
    except json.JSONDecodeError:
        return None  # TraceWriter names the corrupt file
    return bool(settings.get("hidden", True))


class LocalTracer:
    """The model in this process (module doc). The pairs live in ``<folder>/pairs``.

    Args:
        lm: a loaded model.
        engine: what traces the records not yet in the folder (default: :class:`LocalEngine`
            with the calibration's ``batch_size``).
    """

    backend = "local"

    def __init__(self, lm: Any, *, engine: PairEngine | None = None):
        from mnemoscope.detectors.verdict import SIGNALS

        self.lm = lm
        self.engine = engine
        self.signals: tuple[str, ...] = tuple(SIGNALS)
        self._pair: Any = None
        self._T = 0
        self._repcs_alpha = 0.05

    def open(self, config: Any, *, hidden: bool, folder: Path, overwrite: bool) -> None:
        from mnemoscope.trace.pair import PairConfig
        from mnemoscope.trace.templates import PromptBuilder, default_stops

        stored = None if overwrite else _stored_hidden(folder / "pairs")
        if hidden and stored is False:
            raise InputError(
                f"{folder / 'pairs'} holds traces made without hidden states (a calibration without CRM), "
                "and CRM is made of them: pass --overwrite to trace again, or another --out",
                field="with_crm",
            )
        chat = bool(self.lm.info.has_chat_template) if config.chat == "auto" else bool(config.chat)
        stops = tuple(config.stop) if config.stop is not None else default_stops(chat)
        self._pair = PairConfig(
            builder=PromptBuilder(
                template=config.template, task=config.task, chat=chat, stop=stops, app=config.app_prompt
            ),
            max_new_tokens=config.max_new_tokens,
            answer_without=True,
            # a folder already holding hidden states is resumed as it is (its settings say so)
            hidden=hidden or bool(stored),
        )
        self._T = config.max_new_tokens
        if self.engine is None:
            self.engine = LocalEngine(self.lm, batch_size=config.batch_size)

    @property
    def pair_config(self) -> Any:
        if self._pair is None:
            raise InputError("LocalTracer.open() first: the pair settings come from the calibration config")
        return self._pair

    def model_info(self) -> dict[str, Any]:
        return dict(self.lm.info.to_dict())

    def done_ids(self, folder: Path) -> set[str]:
        from mnemoscope.trace.store import stored_ids

        return stored_ids(folder / "pairs")

    def header(self) -> dict[str, Any]:
        from mnemoscope.audit.profile import chat_template_sha256

        b = self.pair_config.builder
        prompt = b.to_dict()
        return {
            "format": PROFILE_FORMAT,
            "model": self.model_info(),
            "prompt": prompt,
            "max_new_tokens": self._T,
            "layout": {
                "prompt": prompt,
                "chat_template_sha256": chat_template_sha256(
                    getattr(self.lm.tokenizer, "chat_template", None) if b.chat else None
                ),
                "max_new_tokens": self._T,
                "stop": list(b.stop),
            },
            # without a fitter that reads hidden states: no CRM artefact, no anomaly rule
            "crm": None,
            "anomaly": None,
        }

    def _run(self, records: Sequence[Any], folder: Path, overwrite: bool, progress: bool) -> Any:
        from mnemoscope.trace.store import stored_ids

        assert self.engine is not None
        summary = self.engine.run(
            records, folder / "pairs", self.pair_config, overwrite=overwrite, progress=progress
        )
        if not stored_ids(folder / "pairs"):
            raise InputError(
                f"no record could be traced ({summary.n_errors} errors; see {folder / 'pairs' / 'errors.jsonl'})"
            )
        return summary

    def answers(self, records: Sequence[Any], folder: Path, *, overwrite: bool, progress: bool) -> Answers:
        from mnemoscope.trace.store import load_answers

        self._run(records, folder, overwrite, progress)
        # the answers only: not every trace of every round read back, arrays included
        return load_answers(folder / "pairs", [r.id for r in records])

    def trace(
        self, records: Sequence[Any], folder: Path, *, overwrite: bool, progress: bool
    ) -> CalibrationTraces:
        from mnemoscope.audit.signals import answer_pieces
        from mnemoscope.trace.store import load_traces

        summary = self._run(records, folder, overwrite, progress)
        by_id = {str(r.id): r for r in records}
        out = CalibrationTraces(seconds=float(summary.seconds))
        for t in load_traces(folder / "pairs"):
            if t.id in by_id:
                out.traces.append(t)
                out.pieces.append(answer_pieces(self.lm.tokenizer, t.answer_ids))
                out.records.append(by_id[t.id])
        out.failures = [
            {"id": e.get("id"), "line": e.get("line"), "message": e.get("message")} for e in summary.errors
        ]
        return out

    def repcs(self, config: Any) -> Any:
        from mnemoscope.detectors.repcs import RePCS

        return RePCS(alpha=config.repcs_alpha, max_steps=config.max_new_tokens)

    def repcs_record(self, repcs: Any) -> dict[str, Any]:
        return dict(repcs.calibration_record())

    def load_profile(self, out: Path) -> Any:
        from mnemoscope.audit.profile import load_profile

        return load_profile(out, model=self.lm.info)

    def auditor(self, profile: Any) -> Any:
        from mnemoscope.audit.auditor import Auditor

        return Auditor(self.lm, profile, batch_size=1)


# -- over an endpoint -------------------------------------------------------------------------------


def endpoint_model_info(client: Any, fp: Any) -> dict[str, Any]:
    """A model identity dict shaped like ``ModelInfo.to_dict()`` for a served model."""
    return {
        "name": client.model,
        "spec": "endpoint",
        "source": "endpoint",
        "fingerprint": f"endpoint:{fp.digest}",
        "endpoint": client.endpoint,
        "endpoint_fingerprint": fp.to_dict(),
        "adapter": None,
    }


@dataclass
class TracedRecords:
    traces: list[PairTrace] = field(default_factory=list)
    pieces: list[list[str]] = field(default_factory=list)
    records: list[Any] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    #: id -> closed-book answer (:func:`trace_with_closed_book` only)
    closed_book: dict[str, str] = field(default_factory=dict)


def trace_records(
    client: Any,
    records: Sequence[Any],
    config: Any,
    *,
    progress: bool = False,
    on_error: str = "skip",
    early_stop: int = 8,
    closed_book: bool = False,
) -> TracedRecords:
    """Trace ``records`` (objects with id/context/query/label) through the server, concurrently;
    with ``closed_book`` each trace's ``answer_without`` is the record's closed-book greedy answer
    (:func:`~mnemoscope.trace.endpoint.trace_endpoint_prompts`).

    A record that fails is listed in ``failures`` (id, line, message) and the batch goes on;
    ``on_error="raise"`` re-raises the first failure. The first ``early_stop`` records are traced
    first: when they all fail for the same cause, :class:`~mnemoscope.audit.results.EarlyStopError`
    names it and the likely fix instead of running to the end (``0`` disables it).
    """
    from tqdm.auto import tqdm

    from mnemoscope.models.endpoint import map_concurrently
    from mnemoscope.trace.endpoint import trace_endpoint_pair

    client.require_teacher_forcing()
    client.require_top_k(config.top_k)
    out = TracedRecords()
    t0 = time.perf_counter()
    bar = tqdm(total=len(records), disable=not progress, desc="endpoint trace", unit="pair")
    stop = EarlyStop(early_stop, what="endpoint tracing")

    def one(r: Any) -> tuple[PairTrace, list[str]]:
        try:
            cb = config.max_new_tokens if closed_book else None
            return trace_endpoint_pair(
                client, str(r.id), r.context, r.query, config, label=r.label, closed_book_tokens=cb
            )
        finally:
            bar.update(1)

    todo = list(records)
    first = max(early_stop, 0)
    try:
        for part in (todo[:first], todo[first:]) if first else (todo,):
            results = map_concurrently(one, part, client.config.concurrency)
            for r, res in zip(part, results, strict=True):
                if isinstance(res, BaseException):
                    if on_error == "raise":
                        raise res
                    if not isinstance(res, MnemoscopeError):
                        log.debug("endpoint trace of %s failed", r.id, exc_info=res)
                    kind = type(res).__name__
                    out.failures.append(
                        {"id": r.id, "line": getattr(r, "line", None), "message": f"{kind}: {res}"}
                    )
                    stop.failed(str(res), kind=kind)
                    continue
                stop.ok()
                t, pc = res
                out.traces.append(t)
                out.pieces.append(pc)
                out.records.append(r)
    finally:
        bar.close()
    out.seconds = time.perf_counter() - t0
    return out


def trace_with_closed_book(
    client: Any,
    records: Sequence[Any],
    config: Any,
    folder: str | Path,
    *,
    model: dict[str, Any],
    progress: bool = True,
    overwrite: bool = False,
    chunk: int = 8,
) -> TracedRecords:
    """:func:`trace_records` plus each record's closed-book answer (a greedy generation on the
    no-context prompt, for label verification), stored under ``folder`` as they come (a re-run
    resumes: records already there are not traced again).

    ``folder`` holds the traces (:class:`~mnemoscope.trace.TraceWriter`) and ``answers.jsonl``
    (``{id, pieces, closed_book}``); other settings or another model are refused unless
    ``overwrite``.
    """
    from tqdm.auto import tqdm

    from mnemoscope.trace import TraceWriter, load_traces

    fold = Path(folder)
    settings = {
        **config.builder.to_dict(),
        "chat_template": config.template.to_dict(),
        "max_new_tokens": config.max_new_tokens,
        "top_k": config.top_k,
        "closed_book": True,
    }
    w = TraceWriter(fold, kind="pair", model=model, settings=settings, overwrite=overwrite)
    side_path = fold / "answers.jsonl"
    if overwrite:
        side_path.unlink(missing_ok=True)
    side: dict[str, dict[str, Any]] = {}
    if side_path.is_file():
        for line in side_path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                side[str(row["id"])] = row
    todo = [r for r in records if str(r.id) not in w.done_ids or str(r.id) not in side]
    out = TracedRecords()
    t0 = time.perf_counter()
    with tqdm(
        total=len(todo), disable=not progress or not todo, desc="endpoint calibrate", unit="rec"
    ) as bar:
        for start in range(0, len(todo), chunk):
            part = todo[start : start + chunk]
            # the closed-book answer comes with each trace (the audits make it the same way)
            tr = trace_records(client, part, config, early_stop=chunk if start == 0 else 0, closed_book=True)
            out.failures += tr.failures
            ok_t: list[PairTrace] = []
            rows: list[dict[str, Any]] = []
            for t, pc, r in zip(tr.traces, tr.pieces, tr.records, strict=True):
                ok_t.append(t)
                rows.append({"id": str(r.id), "pieces": list(pc), "closed_book": t.answer_without or ""})
            w.write(ok_t)
            with side_path.open("a", encoding="utf-8") as f:
                for row in rows:
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")
                    side[row["id"]] = row
            bar.update(len(part))
    by_id = {r.id: r for r in records}
    for t in load_traces(fold):
        if t.id in by_id and t.id in side:
            out.traces.append(t)
            out.pieces.append(list(side[t.id]["pieces"]))
            out.records.append(by_id[t.id])
    out.seconds = time.perf_counter() - t0
    out.closed_book = {t.id: side[t.id]["closed_book"] for t in out.traces}
    return out


class EndpointTracer:
    """A model behind an OpenAI-compatible server (module doc); the traces and each record's
    closed-book answer live in the folder itself (:func:`trace_with_closed_book`).

    Args:
        client: an open :class:`~mnemoscope.models.endpoint.EndpointClient`.
        chat_template: how chat prompts are rendered client-side (``"none"``/``None``: plain
            prompts; ``"default"``, a .gguf or a jinja file: :func:`~mnemoscope.trace.endpoint.load_chat_template`).
        eos_text: the EOS token's text (default: from the template's source).
        top_k: alternatives per position (RePCS's top-k estimate of Z).
    """

    backend = "endpoint"
    signals: tuple[str, ...] = BLACK_BOX_SIGNALS

    def __init__(
        self, client: Any, *, chat_template: str | None = "none", eos_text: str | None = None, top_k: int = 20
    ):
        self.client = client
        self.chat_template = chat_template
        self.eos_text = eos_text
        self.top_k = top_k
        self._pair: Any = None
        self._caps: Any = None
        self._model: dict[str, Any] = {}

    def open(self, config: Any, *, hidden: bool, folder: Path, overwrite: bool) -> None:
        from mnemoscope.trace.endpoint import EndpointPairConfig, load_chat_template
        from mnemoscope.trace.templates import PromptBuilder, default_stops

        if hidden:
            raise InputError(
                "CRM needs the model's hidden states, and an endpoint serves none (only tokens and their "
                "log-probabilities come back over HTTP): calibrate in process (--model) to fit CRM",
                field="with_crm",
            )
        self._caps = self.client.require_teacher_forcing()
        self.client.require_top_k(self.top_k)
        tpl = load_chat_template(self.chat_template, eos_text=self.eos_text)
        chat = tpl.chat_template is not None
        stops = tuple(config.stop) if config.stop is not None else default_stops(chat)
        builder = PromptBuilder(
            template=config.template, task=config.task, chat=chat, stop=stops, app=config.app_prompt
        )
        self._pair = EndpointPairConfig(
            builder=builder, template=tpl, max_new_tokens=config.max_new_tokens, top_k=self.top_k
        )
        self._model = endpoint_model_info(self.client, self.client.fingerprint())

    def model_info(self) -> dict[str, Any]:
        return dict(self._model)

    def done_ids(self, folder: Path) -> set[str]:
        from mnemoscope.trace.store import stored_ids

        return stored_ids(folder)

    def header(self) -> dict[str, Any]:
        from mnemoscope.audit.profile import chat_template_sha256
        from mnemoscope.trace.endpoint import UNMEASURED

        pc = self._pair
        prompt = pc.builder.to_dict()
        return {
            "format": ENDPOINT_PROFILE_FORMAT,
            "backend": "endpoint",
            "model": self.model_info(),
            "endpoint": self.client.config.to_dict(),
            "endpoint_method": self._caps.method,
            "capabilities": self._caps.to_dict(),
            "prompt": prompt,
            "chat_template": pc.template.to_dict(),
            "max_new_tokens": pc.max_new_tokens,
            "top_k": pc.top_k,
            "layout": {
                "prompt": prompt,
                "chat_template_sha256": chat_template_sha256(pc.template.chat_template),
                "max_new_tokens": pc.max_new_tokens,
                "stop": list(pc.builder.stop),
            },
            "unavailable": list(UNMEASURED),
        }

    def _traced(self, records: Sequence[Any], folder: Path, overwrite: bool, progress: bool) -> TracedRecords:
        return trace_with_closed_book(
            self.client,
            records,
            self._pair,
            folder,
            model=self._model,
            progress=progress,
            overwrite=overwrite,
        )

    def answers(self, records: Sequence[Any], folder: Path, *, overwrite: bool, progress: bool) -> Answers:
        tr = self._traced(records, folder, overwrite, progress)
        return {str(t.id): (t.answer_with, tr.closed_book[t.id]) for t in tr.traces}

    def trace(
        self, records: Sequence[Any], folder: Path, *, overwrite: bool, progress: bool
    ) -> CalibrationTraces:
        tr = self._traced(records, folder, overwrite, progress)
        return CalibrationTraces(
            # the closed-book answer travels with its trace (the verdict's closed_book_agreement reads it)
            traces=[replace(t, answer_without=tr.closed_book[t.id]) for t in tr.traces],
            pieces=tr.pieces,
            records=tr.records,
            failures=tr.failures,
            seconds=tr.seconds,
        )

    def repcs(self, config: Any) -> Any:
        from mnemoscope.detectors.repcs import RePCS

        return RePCS(
            alpha=config.repcs_alpha, max_steps=config.max_new_tokens, estimator="topk", k=self.top_k
        )

    def repcs_record(self, repcs: Any) -> dict[str, Any]:
        return dict(repcs.calibration_record(kl_source=f"endpoint top-k estimate (k={self.top_k})"))

    def load_profile(self, out: Path) -> Any:
        from mnemoscope.audit.profile import load_profile

        return load_profile(out, backend="endpoint")

    def auditor(self, profile: Any) -> Any:
        from mnemoscope.audit.auditor import Auditor

        return Auditor.from_endpoint(self.client, profile, check_identity=False)
