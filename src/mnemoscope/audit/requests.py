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
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from mnemoscope.errors import InputError
from mnemoscope.features.attribution import Span, TokenAttribution
from mnemoscope.trace.passages import join_passages

__all__ = [
    "AUDIT_RECORD_FIELDS",
    "AuditFailure",
    "AuditRequest",
    "AuditResult",
    "Source",
    "check_passages",
    "check_request",
    "check_text",
    "input_error_row",
    "json_safe",
    "parse_audit_lines",
    "passages_too_long",
    "read_audit_inputs",
]

#: where an answer came from. ``unsupported``: the answer's answer-bearing words are stated by no
#: passage and the model would not write them without the context either (the model's own
#: addition; never counted as context)
Source = Literal["context", "memory", "mixed", "undetermined", "unsupported"]

#: the fields a batch record (``audit --input``, a Ray JSONL or Parquet row) may carry; any other
#: field is refused for that record, naming it
AUDIT_RECORD_FIELDS = ("id", "context", "passages", "query", "answer", "max_new_tokens")


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
        passages: the retrieved passages the context is made of (``None``: one context string).
            The contract (checked by :func:`check_request`, 422 naming ``passages``): ``context``
            is :func:`~mnemoscope.trace.passages.join_passages` of them -- build such a
            request with :meth:`from_passages`. With ``prompts`` (an application's own prompt,
            e.g. the proxy's) the context is what was located in that prompt, verbatim, and
            the contract is relaxed to: each passage (stripped) occurs in ``context``, in
            order, without overlapping (:func:`~mnemoscope.trace.passages.split_passages`
            makes such passages).
    """

    context: str
    query: str
    answer: str | None = None
    max_new_tokens: int | None = None
    id: str | None = None
    prompts: tuple[str, str] | None = None
    prompt_info: dict[str, Any] | None = None
    served_logprobs: Any = None
    passages: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.passages, list):  # e.g. a request that went through JSON (the Ray actors)
            object.__setattr__(self, "passages", tuple(self.passages))

    @classmethod
    def from_passages(cls, passages: Sequence[str], query: str, **kw: Any) -> AuditRequest:
        """A request whose context is the ``passages`` joined by the one rule
        (:func:`~mnemoscope.trace.passages.join_passages`); ``kw``: the other fields.

        Raises:
            InputError: ``passages`` is not a non-empty list of distinct, non-blank strings
                (field ``passages``, naming the passage).

        >>> r = AuditRequest.from_passages(["Paris is in France.", " Lyon is on the Rhone. "], "Where?")
        >>> r.context
        'Paris is in France.\\n\\nLyon is on the Rhone.'
        >>> r.passages
        ('Paris is in France.', ' Lyon is on the Rhone. ')
        """
        ps = check_passages(passages)
        return cls(join_passages(ps), query, passages=ps, **kw)


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


def check_passages(
    value: Any, *, record: str | int | None = None, context: str | None = None, verbatim: bool = False
) -> tuple[str, ...]:
    """``passages`` must be a non-empty list of distinct, non-blank strings (valid text, see
    :func:`check_text`); with ``context``, the context must be made of them: equal to
    :func:`~mnemoscope.trace.passages.join_passages` of them, or (``verbatim``: a context
    located in an application's prompt) hold each stripped passage, in order, without overlap.

    Returns the passages as a tuple.

    Raises:
        InputError: naming the record, the field ``passages`` and the passage(s) at fault.
    """
    f = "passages"
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise InputError(f"must be a list of strings, got {type(value).__name__}", record=record, field=f)
    if not value:
        raise InputError(
            'is an empty list: give at least one passage (an explicit empty context is "context": "")',
            record=record,
            field=f,
        )
    first: dict[str, int] = {}
    for i, p in enumerate(value):
        if not isinstance(p, str):
            raise InputError(
                f"passages[{i}] must be a string, got {type(p).__name__}", record=record, field=f
            )
        if not p.strip():
            raise InputError(f"passages[{i}] is empty", record=record, field=f)
        try:
            check_text(p, f, allow_empty=False)
        except InputError as e:
            raise InputError(f"passages[{i}] {e.reason}", record=record, field=f) from None
        key = p.strip()
        if key in first:
            raise InputError(
                f"passages[{first[key]}] and passages[{i}] are the same text: give each passage once",
                record=record,
                field=f,
            )
        first[key] = i
    ps = tuple(value)
    if context is not None:
        if not verbatim and context != join_passages(ps):
            raise InputError(
                "the context is not these passages joined (mnemoscope.trace.passages.join_passages); "
                "build the request with AuditRequest.from_passages",
                record=record,
                field=f,
            )
        if verbatim:
            pos = 0
            for i, p in enumerate(ps):
                at = context.find(p.strip(), pos)
                if at < 0:
                    raise InputError(
                        f"passages[{i}] is not in the context (after passages[{i - 1}])"
                        if i
                        else "passages[0] is not in the context",
                        record=record,
                        field=f,
                    )
                pos = at + len(p.strip())
    return ps


def passages_too_long(
    req: AuditRequest,
    failure: AuditFailure | Any,
    count: Callable[[str], int] = len,
    unit: str = "characters",
) -> AuditFailure | Any:
    """``failure`` for a request given as passages: a 413 on the context (or the prompt it makes)
    then names the field ``passages`` and says which passage is the longest (measured by
    ``count``, in ``unit``: a backend passes its own, e.g. its tokenizer's count and
    ``"tokens"``). Anything else (not a failure, another status or field, a request without
    passages) is returned unchanged, so a backend may call it on whatever ``prepare`` returns.

    >>> r = AuditRequest.from_passages(["short", "a much longer passage"], "q?")
    >>> passages_too_long(r, AuditFailure(413, "context has 26 characters; the limit is 10", "context")).message
    'context has 26 characters; the limit is 10: the context is 2 passages joined, the longest is passages[1] (21 characters); shorten or drop it'
    """
    if (
        req.passages is None
        or not isinstance(failure, AuditFailure)
        or failure.status != 413
        or failure.field not in ("context", "prompt")
    ):
        return failure
    sizes = [count(p.strip()) for p in req.passages]
    j = max(range(len(sizes)), key=sizes.__getitem__)
    n = len(sizes)
    return AuditFailure(
        413,
        f"{failure.message}: the context is {n} passage{'s' * (n != 1)} joined, the longest is "
        f"passages[{j}] ({sizes[j]} {unit}); shorten or drop it",
        "passages",
        kind=failure.kind,
    )


def check_request(req: AuditRequest, default_max_new_tokens: int) -> AuditFailure | None:
    """The checks every backend makes on a request before any model call: valid UTF-8 text
    without control characters in query, context and given answer (422), passages that make the
    context (:func:`check_passages`, 422 naming ``passages``), and an answer
    length 1 <= T <= the profile's T (422 otherwise, naming both: the profile's threshold and
    guarantee were fitted on answers of at most its own T tokens). ``None`` when the request is fine."""
    try:
        check_text(req.query, "query", allow_empty=False)
        check_text(req.context, "context", allow_empty=True)
        if req.passages is not None:
            check_passages(req.passages, context=req.context, verbatim=req.prompts is not None)
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
    """:func:`read_audit_inputs` on any iterable of raw JSON lines (the Ray engine feeds Parquet rows).

    A record is ``{"id", "context" | "passages", "query", "answer"?, "max_new_tokens"?}``
    (:data:`AUDIT_RECORD_FIELDS`). Each of these is an :class:`InputError` for that record, naming
    it and the field, and the rest of the batch goes on: neither ``context`` nor ``passages`` (a
    missing context is not an empty one: ``"context": ""`` is the explicit empty context), both,
    a field not in :data:`AUDIT_RECORD_FIELDS`, and any :func:`check_passages` failure (not a
    list of strings, an empty list, a blank passage, the same passage twice)."""
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
            unknown = [k for k in obj if k not in AUDIT_RECORD_FIELDS]
            if unknown:
                raise InputError(
                    f"unknown field{'s' * (len(unknown) > 1)} {', '.join(map(repr, unknown))} "
                    f"(a record has only {', '.join(AUDIT_RECORD_FIELDS)})",
                    record=rid,
                    field=unknown[0],
                )
            passages: tuple[str, ...] | None = None
            if "passages" in obj:
                if "context" in obj:
                    raise InputError(
                        "give either context or passages, not both (the context is made of the passages)",
                        record=rid,
                        field="passages",
                    )
                passages = check_passages(obj["passages"], record=rid)
                context = join_passages(passages)
            elif "context" in obj:
                context = check_text(obj["context"], "context", allow_empty=True, record=rid)
            else:
                raise InputError(
                    'missing: give "context" (a string; "" for an explicit empty context) or "passages" '
                    "(a list of strings)",
                    record=rid,
                    field="context",
                )
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
        yield lineno, AuditRequest(context, query, answer=answer, max_new_tokens=T, id=rid, passages=passages)


def input_error_row(lineno: int, e: InputError) -> dict[str, Any]:
    """The ``errors.jsonl`` row of a record rejected when reading the input."""
    return {
        "id": e.record if isinstance(e.record, str) else None,  # int = line number
        "line": lineno,
        "field": e.field,
        "message": e.reason,
        "status": 422,
    }
