"""JSONL input records with line-precise validation.

Schema of a pair record: ``{"id": str|int, "context": str, "query": str, "label"?: ...}``.
Extra fields are kept in ``Record.extra``.

Label convention everywhere in mnemoscope: **1 = the condition a detector flags**
(member, memorized, recall, contaminated), 0 = its absence. Strings are mapped by an
explicit table (:data:`LABEL_VALUES`); anything else is an error, never a guess.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from mnemoscope.errors import InputError

__all__ = [
    "DEFAULT_QUERY_CHARS",
    "LABEL_VALUES",
    "Record",
    "RecordError",
    "iter_records",
    "parse_label",
    "read_records",
]

DEFAULT_QUERY_CHARS = 100

LABEL_VALUES: dict[str, int] = {
    **dict.fromkeys(
        [
            "1",
            "true",
            "yes",
            "member",
            "members",
            "memorized",
            "memorised",
            "recall",
            "contaminated",
            "seen",
            "positive",
            "pos",
            "in",
        ],
        1,
    ),
    **dict.fromkeys(
        [
            "0",
            "false",
            "no",
            "nonmember",
            "non-member",
            "non_member",
            "nonmembers",
            "clean",
            "reasoning",
            "unseen",
            "negative",
            "neg",
            "out",
        ],
        0,
    ),
}


def parse_label(value: Any, *, record: str | int | None = None) -> int:
    """Map a label to 0/1 (see :data:`LABEL_VALUES`).

    >>> parse_label("member"), parse_label(0), parse_label("Clean")
    (1, 0, 0)
    """
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and math.isnan(value):
            raise InputError("label is NaN", record=record, field="label")
        if value in (0, 1):
            return int(value)
        raise InputError(f"label {value!r} is not binary (expected 0 or 1)", record=record, field="label")
    if isinstance(value, str):
        key = value.strip().lower()
        if key in LABEL_VALUES:
            return LABEL_VALUES[key]
        close = difflib.get_close_matches(key, list(LABEL_VALUES), n=2)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise InputError(
            f"label {value!r} is not one of 0/1, member/nonmember, memorized/clean, recall/reasoning{hint}",
            record=record,
            field="label",
        )
    raise InputError(
        f"label has type {type(value).__name__}; expected 0/1 or a label string", record=record, field="label"
    )


@dataclass(frozen=True)
class Record:
    """One validated input record. ``line`` is the 1-based line in the source file."""

    id: str
    context: str
    query: str
    label: int | None = None
    line: int | None = None
    query_defaulted: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RecordError:
    """A rejected input line."""

    line: int
    id: str | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}" + (f" (id {self.id})" if self.id is not None else "")
        return f"{where}: " + (f"field '{self.field}': " if self.field else "") + self.message

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _parse_line(obj: Any, line: int, *, default_query: bool, require_label: bool) -> Record:
    if not isinstance(obj, dict):
        raise InputError(f"expected a JSON object, got {type(obj).__name__}", record=f"line {line}")
    rid_raw = obj.get("id")
    if rid_raw is None:
        raise InputError("missing field", record=f"line {line}", field="id")
    if not isinstance(rid_raw, (str, int)) or isinstance(rid_raw, bool) or str(rid_raw).strip() == "":
        raise InputError("id must be a non-empty string or an integer", record=f"line {line}", field="id")
    rid = str(rid_raw)
    where = f"{rid} (line {line})"
    if "context" not in obj:
        raise InputError("missing field", record=where, field="context")
    context = obj["context"]
    if not isinstance(context, str):
        raise InputError(f"must be a string, got {type(context).__name__}", record=where, field="context")
    defaulted = False
    query = obj.get("query")
    if query is None:
        if not default_query:
            raise InputError(
                f"missing field (pass --default-query to continue the first {DEFAULT_QUERY_CHARS} characters "
                "of the context)",
                record=where,
                field="query",
            )
        query = context[:DEFAULT_QUERY_CHARS]
        defaulted = True
        if not query.strip():
            raise InputError(
                "missing, and the context is empty so no default query can be made",
                record=where,
                field="query",
            )
    if not isinstance(query, str):
        raise InputError(f"must be a string, got {type(query).__name__}", record=where, field="query")
    if not query.strip():
        raise InputError("is empty", record=where, field="query")
    label = None
    if obj.get("label") is not None:
        label = parse_label(obj["label"], record=where)
    elif require_label:
        raise InputError("missing field", record=where, field="label")
    extra = {k: v for k, v in obj.items() if k not in {"id", "context", "query", "label"}}
    return Record(
        id=rid, context=context, query=query, label=label, line=line, query_defaulted=defaulted, extra=extra
    )


def iter_records(
    path: str | Path, *, default_query: bool = False, require_label: bool = False
) -> Iterator[Record | RecordError]:
    """Yield a :class:`Record` or a :class:`RecordError` per non-blank line (duplicate ids are errors)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"input file not found: {path}")
    seen: dict[str, int] = {}
    with path.open(encoding="utf-8", errors="strict") as f:
        lineno = 0
        while True:
            lineno += 1
            try:
                raw = f.readline()
            except UnicodeDecodeError as e:
                raise InputError(f"{path}: line {lineno} is not valid UTF-8 ({e.reason})") from e
            if raw == "":
                break
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as e:
                yield RecordError(lineno, None, None, f"invalid JSON: {e.msg} (column {e.colno})")
                continue
            try:
                rec = _parse_line(obj, lineno, default_query=default_query, require_label=require_label)
            except InputError as e:
                rid = obj.get("id") if isinstance(obj, dict) else None
                yield RecordError(lineno, None if rid is None else str(rid), e.field, e.reason)
                continue
            if rec.id in seen:
                yield RecordError(lineno, rec.id, "id", f"duplicate id (first seen on line {seen[rec.id]})")
                continue
            seen[rec.id] = lineno
            yield rec


def read_records(
    path: str | Path,
    *,
    default_query: bool = False,
    require_label: bool = False,
    on_error: Literal["skip", "raise"] = "skip",
) -> tuple[list[Record], list[RecordError]]:
    """Read and validate a JSONL file.

    Args:
        path: the JSONL file.
        default_query: a record without ``query`` gets the first 100 characters of its
            context (the CRM paper's BookMIA continuation prefix) instead of an error.
        require_label: a record without ``label`` is an error.
        on_error: ``"skip"`` collects bad lines and returns them; ``"raise"`` raises
            :class:`InputError` at the first bad line.

    Returns:
        (valid records, errors), both in file order.
    """
    records: list[Record] = []
    errors: list[RecordError] = []
    for item in iter_records(path, default_query=default_query, require_label=require_label):
        if isinstance(item, RecordError):
            if on_error == "raise":
                raise InputError(f"{path}: {item}")
            errors.append(item)
        else:
            records.append(item)
    return records, errors
