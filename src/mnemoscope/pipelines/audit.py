"""The audit pipeline: one (context, query) in, a verdict on where the answer came from out.

This module is the only place an audit verdict is decided. The CLI (``mnemoscope audit``),
the server (``/v1/audit``), the integrations and the benchmarks all call :class:`Auditor`::

    >>> # auditor = Auditor.from_spec("default")                 # shipped profile for the default model
    >>> # r = auditor.audit_one("Quenmar lies on the Zorblat.", "Which river is Quenmar on?")
    >>> # r.source, r.p_memory, [s.text for s in r.spans if s.source == "context"]

For each request the answer is decoded once with the context while the no-context path is
fed the same tokens (:func:`mnemoscope.trace.lockstep.trace_lockstep`), which gives per answer
token ``log p(y_t | c, q)``, ``log p(y_t | q)`` and the KL between the two next-token
distributions, plus CRM's last-prompt-token states. From those:

* **signals** (:func:`trace_signals`): RePCS's Z, the closed-book log-probability of the answer,
  the share of context-supported words, CRM's LTS anomaly score;
* **token attribution** (:mod:`mnemoscope.features.attribution`): every token context /
  memory / neutral, merged into spans;
* **p_memory** from the profile's :class:`~mnemoscope.detectors.verdict.VerdictModel`, and the
  memory flag with its conformal guarantee;
* **the source** (:func:`decide_source`): ``context``, ``memory``, ``mixed`` or
  ``undetermined``, with a sentence saying why.

Rules (``rule=``): ``"combined"`` (default: the verdict model's conformal flag), ``"repcs"``
(the RePCS paper: memory iff Z < tau), ``"crm-anomaly"`` (CRM appendix V.1's LTS rule; measured
weak, kept for reproduction). Whatever the rule, an empty context is never flagged.
"""

from __future__ import annotations

import json
import logging
import math
import time
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from mnemoscope.detectors.repcs import RePCS
from mnemoscope.errors import InputError, InputTooLongError, MnemoscopeError
from mnemoscope.features.attribution import (
    Span,
    TokenAttribution,
    attribute_tokens,
    context_token_fraction,
    merge_spans,
    salient,
)
from mnemoscope.pipelines.profile import AuditProfile
from mnemoscope.pipelines.repcs import repcs_verdict
from mnemoscope.trace.types import PairTrace

__all__ = [
    "AuditFailure",
    "AuditRequest",
    "AuditResult",
    "Auditor",
    "Rule",
    "Source",
    "answer_pieces",
    "audit_batch",
    "check_request",
    "check_results_meta",
    "check_text",
    "decide_source",
    "input_error_row",
    "parse_audit_lines",
    "read_audit_inputs",
    "read_done_ids",
    "run_audit_file",
    "trace_signals",
]

log = logging.getLogger(__name__)

Source = Literal["context", "memory", "mixed", "undetermined"]
Rule = Literal["combined", "repcs", "crm-anomaly"]
RULES: tuple[str, ...] = ("combined", "repcs", "crm-anomaly")
RESULTS_FORMAT = "mnemoscope-audit-results/1"

#: Called as ``hook(auditor, requests, results, start_ns)`` after every :meth:`Auditor.audit` batch
#: (the OpenTelemetry spans of :mod:`mnemoscope.integrations.otel` register here); empty by default.
AUDIT_HOOKS: list[Callable[..., None]] = []


# -- requests and results -------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditRequest:
    """What a caller asks: a retrieved context and the query it was retrieved for.

    Attributes:
        context: the retrieved context (may be empty: then there is no evidence either way).
        query: the user's query.
        answer: an answer to score instead of generating one (e.g. what a RAG chain's LLM
            said); it is teacher-forced on both paths.
        max_new_tokens: answer length T (default: the profile's).
        id: the caller's id (echoed back; batch files require one).
    """

    context: str
    query: str
    answer: str | None = None
    max_new_tokens: int | None = None
    id: str | None = None


@dataclass(frozen=True)
class AuditFailure:
    """A request that could not be audited: an HTTP-like status and the field at fault."""

    status: int
    message: str
    field: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "message": self.message, "field": self.field}


@dataclass(frozen=True)
class AuditResult:
    """Where one answer came from, and the evidence (JSON-ready through :meth:`to_dict`)."""

    source: Source
    p_memory: float | None
    answer: str
    summary: str
    rule: str
    evidence: dict[str, Any]
    guarantee: dict[str, Any]
    tokens: list[TokenAttribution]
    spans: list[Span]
    repcs: dict[str, Any]
    crm: dict[str, Any] | None
    n_steps: int
    identical_prompts: bool
    notes: list[str] = field(default_factory=list)
    #: the rule's memory flag (the one decision consumers count and filter on; never re-derived)
    memory_flag: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The audit as JSON-ready data (no NaN/inf: what was not measured is ``null``)."""
        return _json_safe(
            {
                "source": self.source,
                "p_memory": self.p_memory,
                "memory_flag": self.memory_flag,
                "answer": self.answer,
                "summary": self.summary,
                "rule": self.rule,
                "evidence": self.evidence,
                "guarantee": self.guarantee,
                "tokens": [
                    {
                        "text": t.text,
                        "source": t.source,
                        "pmi": t.pmi,
                        "kl": t.kl,
                        "logp_with": t.logp_with,
                        "logp_without": t.logp_without,
                        "start": t.start,
                        "end": t.end,
                    }
                    for t in self.tokens
                ],
                "spans": [s.to_dict() for s in self.spans],
                "repcs": self.repcs,
                "crm": self.crm,
                "n_steps": self.n_steps,
                "identical_prompts": self.identical_prompts,
                "notes": list(self.notes),
            }
        )


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, (np.floating, np.integer)):
        return _json_safe(obj.item())
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _json_safe(obj.tolist())
    return obj


# -- input checks ----------------------------------------------------------------------------------

_ALLOWED_CONTROL = {"\n", "\r", "\t"}


def check_text(value: Any, field_name: str, *, allow_empty: bool, record: str | None = None) -> str:
    """A text field must be a valid Unicode string without control characters (tabs/newlines aside).

    Raises:
        InputError: naming the record and field (wrong type, empty, lone surrogate, control char).
    """
    if not isinstance(value, str):
        raise InputError(f"must be a string, got {type(value).__name__}", record=record, field=field_name)
    if not allow_empty and not value.strip():
        raise InputError("is empty", record=record, field=field_name)
    for i, ch in enumerate(value):
        cat = unicodedata.category(ch)
        if cat == "Cs":
            raise InputError(
                f"is not valid UTF-8 text (lone surrogate U+{ord(ch):04X} at character {i})",
                record=record,
                field=field_name,
            )
        if cat == "Cc" and ch not in _ALLOWED_CONTROL:
            raise InputError(
                f"contains the control character U+{ord(ch):04X} at character {i}",
                record=record,
                field=field_name,
            )
    return value


# -- signals and the decision ----------------------------------------------------------------------


def check_request(req: AuditRequest, default_max_new_tokens: int) -> AuditFailure | None:
    """The checks every backend makes on a request before any model call: valid UTF-8 text
    without control characters in query, context and given answer (422), and an answer
    length T >= 1 (422). ``None`` when the request is fine."""
    try:
        check_text(req.query, "query", allow_empty=False)
        check_text(req.context, "context", allow_empty=True)
        if req.answer is not None:
            check_text(req.answer, "answer", allow_empty=False)
    except InputError as e:
        return AuditFailure(422, e.reason, e.field)
    T = req.max_new_tokens or default_max_new_tokens
    if T < 1:
        return AuditFailure(422, f"max_new_tokens must be >= 1, got {T}", "max_new_tokens")
    return None


def answer_pieces(tokenizer: Any, answer_ids: Sequence[int] | np.ndarray) -> list[str]:
    """The text each answer token adds to the decoded answer (special tokens add ``""``).

    Decoding growing prefixes keeps sentencepiece spacing right; a byte-level piece that
    leaves a character incomplete adds ``""`` and the token that completes it adds the whole
    character. ``"".join(pieces)`` is the answer text every offset refers to (it equals the
    decoded answer; for byte sequences that never form valid UTF-8 it falls back to decoding
    token by token).
    """
    ids = [int(i) for i in answer_ids]
    full = tokenizer.decode(ids, skip_special_tokens=True)
    pieces: list[str] = []
    prev = ""
    for t in range(len(ids)):
        cur = tokenizer.decode(ids[: t + 1], skip_special_tokens=True)
        if cur.startswith(prev) and not cur.endswith("\ufffd"):
            pieces.append(cur[len(prev) :])
            prev = cur
        else:  # an incomplete character (or a clean-up that rewrote the prefix): wait
            pieces.append("")
    if pieces and full.startswith(prev):
        pieces[-1] += full[len(prev) :]
    if "".join(pieces) != full:
        pieces = [tokenizer.decode([i], skip_special_tokens=True) for i in ids]
    return pieces


def trace_signals(
    trace: PairTrace,
    pieces: Sequence[str],
    *,
    margin: float,
    repcs: RePCS,
    profile: AuditProfile | None = None,
) -> tuple[dict[str, float], list[TokenAttribution]]:
    """The verdict's signals and the token attribution of one trace (no model call).

    ``lts_score`` is present only when the trace has hidden states and a profile is given.
    ``context_token_fraction`` is 0.5 (uninformative) when no word of the answer is
    attributed either way.
    """
    top1 = np.asarray(trace.topk_ids_without[:, 0] == trace.answer_ids, dtype=bool)
    tokens = attribute_tokens(
        pieces=pieces,
        logp_with=trace.logprob_answer_with,
        logp_without=trace.logprob_answer_without,
        kl=trace.kl_steps,
        top1_without=top1,
        query=trace.query,
        margin=margin,
    )
    frac = context_token_fraction(tokens)
    signals = {
        "repcs_z": float(repcs.z([trace])[0]),
        "closed_book_logprob": float(np.mean(trace.logprob_answer_without)) if trace.n_steps else 0.0,
        "context_token_fraction": 0.5 if frac is None else float(frac),
    }
    if profile is not None and trace.h_with is not None and trace.h_without is not None:
        lts = profile.crm.lts(trace.displacement)
        signals["lts_score"] = float(profile.anomaly.decide(lts, profile.crm)[2])
    return signals, tokens


def decide_source(
    *,
    identical_prompts: bool,
    answer: str,
    memory_flag: bool,
    p_memory: float | None,
    spans: Sequence[Span],
) -> tuple[Source, str]:
    """The one decision: where the answer came from, and why in words.

    * empty context or empty answer: ``undetermined`` (no evidence; never ``memory``);
    * flagged as memory: ``memory``, or ``mixed`` when some names or numbers are still
      context-supported;
    * not flagged: ``mixed`` when both context- and memory-attributed names or numbers are present
      (:func:`~mnemoscope.features.attribution.salient`),
      ``context`` when the answer leans on the context, ``undetermined`` when p_memory leans
      towards memory but stays under the flag threshold.
    """
    if identical_prompts:
        return "undetermined", (
            "The context is empty, so both paths are the same prompt: there is no evidence either way "
            "and the answer is never flagged as memory."
        )
    if not answer.strip():
        return "undetermined", "The model gave an empty answer: there is nothing to attribute."
    # item level: only spans that name something count (prior words stay marked at the token level)
    has_ctx = any(s.source == "context" and salient(s.text) for s in spans)
    has_mem = any(s.source == "memory" and salient(s.text) for s in spans)
    if memory_flag:
        if has_ctx:
            return "mixed", (
                "Mostly from memory (the flag fired), but some words are supported only by the context."
            )
        return "memory", "Answered from memory: the model gives this answer without the context."
    if has_ctx and has_mem:
        return "mixed", "Mixed: some words come from the context, others the model knew without it."
    if p_memory is not None and p_memory > 0.5:
        return "undetermined", (
            "Leans towards memory, but not beyond the calibrated threshold: no flag is raised."
        )
    return "context", "Answered from the context: the context changed the answer."


def _crm_block(trace: PairTrace, profile: AuditProfile) -> dict[str, Any] | None:
    if trace.h_with is None or trace.h_without is None:
        return None
    crm = profile.crm
    lts = crm.lts(trace.displacement)
    z, flagged, score, flag = profile.anomaly.decide(lts, crm)
    if trace.identical_prompts:
        flag, flagged = False, np.zeros_like(flagged)
    return {
        "label": "secondary: CRM's unsupervised LTS anomaly rule (appendix V.1); weak on context reliance "
        "(AUC ~0.70) and at chance for membership, see docs/crm.md",
        "anomaly_flag": bool(flag),
        "anomaly_score": float(score),
        "lts_trajectory": [float(v) for v in lts],
        "lts_z": [float(v) for v in z],
        "layers": [int(v) for v in crm.layers],
        "flagged_layers": [int(crm.layers[j]) for j in np.flatnonzero(flagged)],
        "rule": profile.anomaly.rule,
    }


# -- the auditor -----------------------------------------------------------------------------------


class Auditor:
    """Audits (context, query) pairs on one loaded model with one verified profile.

    Args:
        lm: the loaded model (must be the profile's model).
        profile: a verified :class:`~mnemoscope.pipelines.profile.AuditProfile`.
        rule: the memory rule (module doc).
        max_context_tokens, max_query_tokens, max_answer_tokens: input caps (413 above them).
        batch_size: pairs decoded together.
        crm_probability: also compute CRM's supervised classifier (secondary; needs a
            profile with a classifier).
    """

    def __init__(
        self,
        lm: Any,
        profile: AuditProfile,
        *,
        rule: Rule = "combined",
        max_context_tokens: int = 2048,
        max_query_tokens: int = 256,
        max_answer_tokens: int = 256,
        batch_size: int = 8,
        crm_probability: bool = True,
    ):
        from mnemoscope.trace.tracer import Tracer

        if rule not in RULES:
            raise InputError(f"unknown rule {rule!r}; choose one of {list(RULES)}", field="rule")
        profile.check_model(lm.info)
        if rule == "combined" and profile.verdict is None:
            raise InputError(
                f"the profile {profile.path} has no verdict model (it was calibrated without both labels); "
                "use rule='repcs' or recalibrate with labelled records",
                field="rule",
            )
        self.lm = lm
        self.profile = profile
        self.rule: Rule = rule
        self.max_context_tokens = max_context_tokens
        self.max_query_tokens = max_query_tokens
        self.max_answer_tokens = max_answer_tokens
        self.batch_size = batch_size
        self.tracer = Tracer(lm, batch_size=batch_size)
        self._repcs = RePCS.from_calibration(profile.header["repcs"])
        needed = profile.verdict is not None and "crm_probability" in profile.verdict.selected_
        self._crm_probability = (crm_probability or needed) and profile.crm.classifier != "none"

    @classmethod
    def from_spec(
        cls,
        model: str = "default",
        *,
        adapter: str | Path | None = None,
        profile: str | Path | None = None,
        device: str | None = None,
        dtype: str | None = None,
        **kw: Any,
    ) -> Auditor:
        """Load the model and its profile (the shipped one for the default model when ``profile`` is None)."""
        from mnemoscope.models import load_model
        from mnemoscope.pipelines.profile import default_profile_path, load_profile

        lm = load_model(model, adapter=adapter, device=device, dtype=dtype)
        path = profile if profile is not None else default_profile_path(lm.info)
        return cls(lm, load_profile(path, model=lm.info), **kw)

    @property
    def model_info(self) -> dict[str, Any]:
        return dict(self.lm.info.to_dict())

    @property
    def identity(self) -> dict[str, Any]:
        """What makes two audits comparable: the model, the profile and the settings."""
        info = self.model_info
        return {
            "model": {k: info.get(k) for k in ("name", "spec", "fingerprint", "adapter")},
            "profile_hash": self.profile.content_hash,
            "settings": {
                "rule": self.rule,
                "max_new_tokens": self.profile.max_new_tokens,
                "prompt": self.profile.header["prompt"],
            },
        }

    # -- preparation --------------------------------------------------------------------------

    def _count(self, text: str) -> int:
        return len(self.tracer.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _prepare(self, i: int, req: AuditRequest) -> tuple[Any, list[int] | None, int] | AuditFailure:
        from mnemoscope.trace.pair import PairItem, prepare_pair

        rid = req.id if req.id is not None else str(i)
        bad = check_request(req, self.profile.max_new_tokens)
        if bad is not None:
            return bad
        T = req.max_new_tokens or self.profile.max_new_tokens
        for text, name, cap in (
            (req.context, "context", self.max_context_tokens),
            (req.query, "query", self.max_query_tokens),
        ):
            n = self._count(text)
            if n > cap:
                return AuditFailure(413, f"{name} has {n} tokens; the limit is {cap}", name)
        forced = None
        if req.answer is not None:
            forced = list(self.tracer.tokenizer(req.answer, add_special_tokens=False)["input_ids"])
            if len(forced) > self.max_answer_tokens:
                return AuditFailure(
                    413, f"answer has {len(forced)} tokens; the limit is {self.max_answer_tokens}", "answer"
                )
            T = len(forced)
        try:
            prepared = prepare_pair(
                self.tracer, PairItem(rid, req.context, req.query), self.profile.pair_config(T)
            )
        except InputTooLongError as e:
            return AuditFailure(413, e.reason, e.field)
        except InputError as e:
            return AuditFailure(422, e.reason, e.field)
        return prepared, forced, T

    # -- auditing -----------------------------------------------------------------------------

    def trace(self, prepared: Sequence[Any], forced: Sequence[list[int] | None], T: int) -> list[PairTrace]:
        """Decode a group of prepared pairs in lockstep (both paths, one generation)."""
        from mnemoscope.trace.lockstep import trace_lockstep

        return trace_lockstep(self.tracer, prepared, self.profile.pair_config(T), forced_answers=forced)

    def audit(self, requests: Sequence[AuditRequest]) -> list[AuditResult | AuditFailure]:
        """Audit a batch; the result list is aligned with ``requests``. A bad request gets its own
        :class:`AuditFailure` and the others are still audited."""
        started = time.time_ns() if AUDIT_HOOKS else 0
        out: list[AuditResult | AuditFailure | None] = [None] * len(requests)
        groups: dict[tuple[int, bool], list[tuple[int, Any, list[int] | None]]] = {}
        for i, req in enumerate(requests):
            p = self._prepare(i, req)
            if isinstance(p, AuditFailure):
                out[i] = p
                continue
            prepared, forced, T = p
            groups.setdefault((T, forced is not None), []).append((i, prepared, forced))
        for (T, _), group in groups.items():
            for start in range(0, len(group), self.batch_size):
                chunk = group[start : start + self.batch_size]
                try:
                    traces = self.trace([p for _, p, _ in chunk], [f for _, _, f in chunk], T)
                except InputTooLongError as e:
                    for i, _, _ in chunk:
                        out[i] = AuditFailure(413, e.reason, e.field)
                    continue
                except MnemoscopeError as e:
                    for i, _, _ in chunk:
                        out[i] = AuditFailure(422, str(e))
                    continue
                for (i, _, _), t in zip(chunk, traces, strict=True):
                    out[i] = self.score(t)
        results = [o if o is not None else AuditFailure(500, "not audited") for o in out]
        for hook in AUDIT_HOOKS:
            hook(self, requests, results, started)
        return results

    def audit_one(self, context: str, query: str, *, answer: str | None = None) -> AuditResult:
        """Audit one pair; raises :class:`InputError` (``InputTooLongError`` for 413) on bad input."""
        (res,) = self.audit([AuditRequest(context, query, answer=answer)])
        if isinstance(res, AuditFailure):
            cls = InputTooLongError if res.status == 413 else InputError
            raise cls(res.message, field=res.field)
        return res

    def score(self, t: PairTrace, pieces: Sequence[str] | None = None) -> AuditResult:
        """Everything after the model call: signals, attribution, verdict (no model call here).

        ``pieces``: the text each answer token adds (default: decoded with the local tokenizer;
        the endpoint backend passes the server's own token strings).
        """
        prof = self.profile
        if pieces is None:
            pieces = answer_pieces(self.tracer.tokenizer, t.answer_ids.tolist())
        answer = "".join(pieces)
        signals, tokens = trace_signals(t, pieces, margin=prof.token_margin, repcs=self._repcs, profile=prof)
        spans = merge_spans(tokens)
        notes: list[str] = []
        crm = _crm_block(t, prof)
        if crm is not None and self._crm_probability:
            from mnemoscope.features.crm import crm_data_from_pairs

            crm["crm_probability"] = float(prof.crm.predict_proba(crm_data_from_pairs([t]))[0])
            signals["crm_probability"] = crm["crm_probability"]
        verdict = prof.verdict
        p_memory: float | None = None
        if verdict is not None:
            missing = [s for s in verdict.selected_ if s not in signals]
            if missing:
                notes.append(f"p_memory not measured: signals {missing} are unavailable on this path")
            else:
                p_memory = float(verdict.predict_proba({k: [v] for k, v in signals.items()})[0])
        rv = repcs_verdict(self._repcs, t)
        z, tau, repcs_memorized = rv["kl"], rv["tau"], rv["memorized"]
        if self.rule == "combined":
            assert verdict is not None
            memory_flag = p_memory is not None and bool(verdict.flag(p_memory))
        elif self.rule == "repcs":
            memory_flag = repcs_memorized
        else:
            memory_flag = bool(crm is not None and crm["anomaly_flag"])
        memory_flag = memory_flag and not t.identical_prompts
        source, why = decide_source(
            identical_prompts=t.identical_prompts,
            answer=answer,
            memory_flag=memory_flag,
            p_memory=p_memory,
            spans=spans,
        )
        guarantee = self._guarantee()
        if t.identical_prompts:
            notes.append("empty context: both paths are identical, every statistic is 0 by construction")
        frac = context_token_fraction(tokens)
        return AuditResult(
            source=source,
            p_memory=p_memory,
            answer=answer,
            summary=why,
            rule=self.rule,
            evidence={
                "repcs_z": z,
                "tau": tau,
                "closed_book_logprob": signals["closed_book_logprob"],
                "context_token_fraction": frac,
                "threshold": guarantee.get("threshold"),
                "signals_used": list(verdict.selected_) if verdict is not None else [],
            },
            guarantee=guarantee,
            tokens=tokens,
            spans=spans,
            repcs=rv,
            crm=crm,
            n_steps=int(t.n_steps),
            identical_prompts=bool(t.identical_prompts),
            notes=notes,
            memory_flag=bool(memory_flag),
        )

    def _guarantee(self) -> dict[str, Any]:
        prof = self.profile
        v = prof.verdict
        if self.rule == "combined" and v is not None:
            g: dict[str, Any] = {
                "alpha": v.alpha,
                "n_calibration": v.n_conformal_,
                "certified": v.certified_,
                "threshold": v.threshold_,
            }
            g["statement"] = (
                f"a context-needed answer is flagged as memory with probability at most {v.alpha:g} "
                f"(split-conformal, {v.n_conformal_} held-out clean calibration answers)"
                if v.certified_
                else f"NOT certified: {v.n_conformal_} held-out clean calibration answers cannot certify "
                f"alpha={v.alpha:g} (at least {v.min_n_} are needed); flagged when p_memory > 0.5"
            )
            return g
        if self.rule == "repcs":
            rec = prof.header["repcs"]
            certified = math.isfinite(prof.repcs_tau)
            return {
                "alpha": float(rec["alpha"]),
                "n_calibration": int(rec["n"]),
                "certified": certified,
                "threshold": prof.repcs_tau if certified else None,
                "statement": "RePCS paper rule: memory when Z < tau (conformal lower quantile of clean Z)"
                if certified
                else "NOT certified: too few clean calibration queries for tau; nothing is flagged",
            }
        a = prof.anomaly
        return {
            "alpha": a.alpha,
            "n_calibration": a.n_threshold,
            "certified": a.score_threshold is not None and a.rule == "calibrated",
            "threshold": a.score_threshold,
            "statement": "CRM anomaly rule (secondary): the guarantee concerns anomalous LTS, not memory",
        }


# -- batch files -----------------------------------------------------------------------------------


def read_audit_inputs(path: str | Path) -> Iterator[tuple[int, AuditRequest | InputError]]:
    """Yield ``(line number, request or the error naming record and field)`` for a JSONL file."""
    with Path(path).open("rb") as f:
        yield from parse_audit_lines(f)


def parse_audit_lines(lines: Iterable[bytes]) -> Iterator[tuple[int, AuditRequest | InputError]]:
    """:func:`read_audit_inputs` on any iterable of raw JSON lines (the Ray engine feeds Parquet rows)."""
    seen: set[str] = set()
    for lineno, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            yield (
                lineno,
                InputError(f"line is not valid UTF-8 ({e.reason} at byte {e.start})", record=lineno),
            )
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            yield lineno, InputError(f"invalid JSON ({e.msg})", record=lineno)
            continue
        if not isinstance(obj, dict):
            yield lineno, InputError("a record must be a JSON object", record=lineno)
            continue
        rid = obj.get("id")
        if not isinstance(rid, (str, int)) or isinstance(rid, bool) or str(rid) == "":
            yield (
                lineno,
                InputError("missing or invalid id (a string or an integer)", record=lineno, field="id"),
            )
            continue
        rid = str(rid)
        if rid in seen:
            yield lineno, InputError("duplicate id", record=rid, field="id")
            continue
        seen.add(rid)
        try:
            context = check_text(obj.get("context", ""), "context", allow_empty=True, record=rid)
            query = check_text(obj.get("query"), "query", allow_empty=False, record=rid)
            answer = obj.get("answer")
            if answer is not None:
                check_text(answer, "answer", allow_empty=False, record=rid)
            T = obj.get("max_new_tokens")
            if T is not None and (not isinstance(T, int) or isinstance(T, bool) or T < 1):
                raise InputError("must be a positive integer", record=rid, field="max_new_tokens")
        except InputError as e:
            yield lineno, e
            continue
        yield lineno, AuditRequest(context, query, answer=answer, max_new_tokens=T, id=rid)


def read_done_ids(path: Path) -> set[str]:
    """The ids already in a ``results.jsonl`` (a torn last line is ignored: it is redone)."""
    done: set[str] = set()
    if not path.is_file():
        return done
    with path.open(encoding="utf-8") as f:
        for line in f:
            try:
                done.add(str(json.loads(line)["id"]))
            except (json.JSONDecodeError, KeyError, TypeError):
                continue  # a torn last line from a crash: the record is audited again
    return done


def check_results_meta(out: Path, identity: dict[str, Any], overwrite: bool) -> None:
    """Write ``out/meta.json`` for a new folder; refuse a folder holding another run's results.

    Raises:
        InputError: the folder's model, profile or settings differ (unless ``overwrite``).
    """
    from mnemoscope.io import atomic_write, canonical_json

    meta_path = out / "meta.json"
    meta = {"format": RESULTS_FORMAT, **identity}
    if meta_path.is_file() and not overwrite:
        try:
            old = json.loads(meta_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise InputError(f"{meta_path} is not valid JSON ({e.msg}); use --overwrite") from e
        if canonical_json(old) != canonical_json(meta):
            diff = sorted(k for k in meta if old.get(k) != meta.get(k))
            raise InputError(
                f"{out} holds results of another run (differs in {', '.join(diff)}); use another --out "
                "or --overwrite",
                field="out",
            )
        return
    if overwrite:
        for name in ("results.jsonl", "errors.jsonl"):
            (out / name).unlink(missing_ok=True)
    atomic_write(meta_path, json.dumps(meta, indent=1, default=str) + "\n")


def input_error_row(lineno: int, e: InputError) -> dict[str, Any]:
    """The ``errors.jsonl`` row of a record rejected when reading the input."""
    return {
        "id": e.record if isinstance(e.record, str) else None,  # int = line number
        "line": lineno,
        "field": e.field,
        "message": e.reason,
        "status": 422,
    }


def audit_batch(
    auditor: Auditor, chunk: Sequence[tuple[int, AuditRequest]]
) -> tuple[list[str], list[dict[str, Any]]]:
    """Audit one batch of ``(line number, request)``: the ``results.jsonl`` lines and the error rows.

    The one per-batch step of :func:`run_audit_file`; the Ray engine's actors call it too, so
    both engines write the same bytes for the same batch.
    """
    results = auditor.audit([r for _, r in chunk])
    lines: list[str] = []
    errors: list[dict[str, Any]] = []
    for (lineno, req), res in zip(chunk, results, strict=True):
        if isinstance(res, AuditFailure):
            errors.append({"id": req.id, "line": lineno, **res.to_dict()})
        else:
            lines.append(json.dumps({"id": req.id, **res.to_dict()}, ensure_ascii=False))
    return lines, errors


def run_audit_file(
    auditor: Auditor,
    input_path: str | Path,
    out_dir: str | Path,
    *,
    progress: bool = True,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Audit every record of a JSONL file into ``out_dir`` (resumable).

    Writes ``results.jsonl`` (``{"id", **AuditResult.to_dict()}`` per record, appended and
    fsynced batch by batch), ``errors.jsonl`` (``{"id", "line", "field", "message",
    "status"}`` per bad record; rewritten each run) and ``meta.json`` (the auditor's identity:
    a folder refuses results of another model, profile or rule). A re-run skips ids already
    in ``results.jsonl``.
    """
    import os

    from tqdm.auto import tqdm

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    check_results_meta(out, auditor.identity, overwrite)
    results_path, errors_path = out / "results.jsonl", out / "errors.jsonl"
    done = read_done_ids(results_path)
    todo: list[tuple[int, AuditRequest]] = []
    errors: list[dict[str, Any]] = []
    n_lines = 0
    for lineno, item in read_audit_inputs(input_path):
        n_lines += 1
        if isinstance(item, InputError):
            errors.append(input_error_row(lineno, item))
        elif item.id not in done:
            todo.append((lineno, item))
    n_ok = 0
    with (
        results_path.open("a", encoding="utf-8") as rf,
        tqdm(total=len(todo), disable=not progress, unit="audit", desc="audit") as bar,
    ):
        for start in range(0, len(todo), auditor.batch_size):
            chunk = todo[start : start + auditor.batch_size]
            lines, failed = audit_batch(auditor, chunk)
            errors.extend(failed)
            n_ok += len(lines)
            if lines:
                rf.write("\n".join(lines) + "\n")
                rf.flush()
                os.fsync(rf.fileno())
            bar.update(len(chunk))
    with errors_path.open("w", encoding="utf-8") as ef:
        for e in errors:
            ef.write(json.dumps(e, ensure_ascii=False) + "\n")
    summary = {
        "records": n_lines,
        "audited": n_ok,
        "skipped_done": len(done),
        "errors": len(errors),
        "out": str(out),
    }
    log.info("audit: %s", summary)
    return summary
