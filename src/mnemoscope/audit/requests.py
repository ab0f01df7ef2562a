"""What a caller asks an audit and what it gets back: requests, results, failures, input checks.

Every backend (:mod:`mnemoscope.audit.backends`) and every entry point (CLI, server, proxy,
integrations, Ray) speaks these types; :func:`check_request` is the check every backend makes
before any model call, and :func:`parse_audit_lines` reads a batch file with per-record errors
naming the record and the field.
"""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from mnemoscope.errors import InputError
from mnemoscope.features.attribution import Span, TokenAttribution

__all__ = [
    "AuditFailure",
    "AuditRequest",
    "AuditResult",
    "Source",
    "check_request",
    "check_text",
    "input_error_row",
    "json_safe",
    "parse_audit_lines",
    "read_audit_inputs",
]

Source = Literal["context", "memory", "mixed", "undetermined"]


@dataclass(frozen=True)
class AuditRequest:
    """What a caller asks: a retrieved context and the query it was retrieved for.

    Attributes:
        context: the retrieved context (may be empty: then there is no evidence either way).
        query: the user's query.
        answer: an answer to score instead of generating one (e.g. what a RAG chain's LLM
            said); it is teacher-forced on both paths.
        max_new_tokens: answer length T (default: the profile's); more than the profile's T is
            refused with 422 (its calibration saw answers of at most that many tokens).
        id: the caller's id (echoed back; batch files require one).
        prompts: the two prompts already rendered (with the context, without it), e.g. an
            application's own messages through its chat template (the proxy); ``context`` and
            ``query`` are then only recorded. Backends that cannot trace pre-rendered prompts
            refuse it (422).
        prompt_info: what to record in the trace about how ``prompts`` were made (e.g. the layout).
        served_logprobs: the with-context log-probs of ``answer`` as the server returned them with
            it (the proxy's case, ``mnemoscope.trace.endpoint_score.served_scores``); the endpoint
            backend uses them instead of re-scoring that path when they line up. Others ignore it.
    """

    context: str
    query: str
    answer: str | None = None
    max_new_tokens: int | None = None
    id: str | None = None
    prompts: tuple[str, str] | None = None
    prompt_info: dict[str, Any] | None = None
    served_logprobs: Any = None


@dataclass(frozen=True)
class AuditFailure:
    """A request that could not be audited: an HTTP-like status and the field at fault.

    ``kind`` names the error class behind it (e.g. ``TokenAlignmentError``); it is not part of
    :meth:`to_dict` and serves to tell "the same cause" when a batch stops early.
    """

    status: int
    message: str
    field: str | None = None
    kind: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "message": self.message, "field": self.field}


@dataclass(frozen=True)
class AuditResult:
    """Where one answer came from, and the evidence (JSON-ready through :meth:`to_dict`).

    ``extra``: the backend's own fields, appended after the common ones (the endpoint backend
    adds ``backend``, ``endpoint_method``, ``endpoint`` and ``unavailable``).
    """

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
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The audit as JSON-ready data (no NaN/inf: what was not measured is ``null``)."""
        d = {
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
        d.update(self.extra)
        return json_safe(d)


def json_safe(obj: Any) -> Any:
    """``obj`` with numpy scalars/arrays as Python values and NaN/inf as ``None``."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, (np.floating, np.integer)):
        return json_safe(obj.item())
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return json_safe(obj.tolist())
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


def check_request(req: AuditRequest, default_max_new_tokens: int) -> AuditFailure | None:
    """The checks every backend makes on a request before any model call: valid UTF-8 text
    without control characters in query, context and given answer (422), and an answer
    length 1 <= T <= the profile's T (422 otherwise, naming both: the profile's threshold and
    guarantee were fitted on answers of at most its own T tokens). ``None`` when the request is fine."""
    try:
        check_text(req.query, "query", allow_empty=False)
        check_text(req.context, "context", allow_empty=True)
        if req.answer is not None:
            check_text(req.answer, "answer", allow_empty=False)
        for p in req.prompts or ():
            check_text(p, "prompts", allow_empty=False)
    except InputError as e:
        return AuditFailure(422, e.reason, e.field, kind="InputError")
    T = req.max_new_tokens or default_max_new_tokens
    if T < 1:
        return AuditFailure(422, f"max_new_tokens must be >= 1, got {T}", "max_new_tokens", kind="InputError")
    if default_max_new_tokens < T:
        # the profile's RePCS threshold, verdict and certification were fitted on answers of at most
        # its own T tokens (a shorter T is an answer that stops earlier, as calibration answers do)
        return AuditFailure(
            422,
            f"max_new_tokens {T}: the profile was calibrated on answers of at most T = {default_max_new_tokens} "
            f"tokens, and its threshold, verdict and guarantee hold for those lengths only; ask for at most "
            f"{default_max_new_tokens}, or audit with a profile calibrated with --max-new-tokens {T}",
            "max_new_tokens",
            kind="InputError",
        )
    return None


# -- batch input files -----------------------------------------------------------------------------


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


def input_error_row(lineno: int, e: InputError) -> dict[str, Any]:
    """The ``errors.jsonl`` row of a record rejected when reading the input."""
    return {
        "id": e.record if isinstance(e.record, str) else None,  # int = line number
        "line": lineno,
        "field": e.field,
        "message": e.reason,
        "status": 422,
    }
