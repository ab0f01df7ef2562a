"""Membership-inference datasets -> :class:`Document` lists with line-precise errors.

Formats (label 1 = member, mapped with :func:`mnemoscope.data.parse_label`):

* ``"jsonl"`` (generic): ``{"id"?, "text" | "context", "query"?, "label"?}``. ``text`` is
  preferred, else ``context``; ``id`` defaults to ``"L<line>"``; ``label`` may be absent
  (``None``); other fields (``query`` ...) go to ``meta``.
* ``"wikimia"``: ``{"input", "label"}`` (JSONL or a JSON array); ids are ``"wikimia-<index>"``.
* ``"bookmia"``: ``{"snippet" | "input" | "text", "label"}`` (JSONL, JSON array or CSV); ids
  are ``"bookmia-<index>"``; extra columns (``book_id``, ``book``, ``snippet_id``) go to ``meta``.
* ``"mimir"``: a folder with ``member.jsonl`` and ``nonmember.jsonl`` (or ``members`` /
  ``nonmembers``, or ``.txt`` files with one document per line), or a JSON file
  ``{"member": [...], "nonmember": [...]}``. Each element is a string or ``{"text", "id"?}``;
  the label is the list the document is in; ids default to ``"member-<index>"`` /
  ``"nonmember-<index>"``.
* ``"auto"``: a folder is MIMIR; a file is detected from its first record's keys: fields
  that only one format has decide first (``book`` / ``book_id`` / ``snippet_id``: BookMIA,
  whatever its text column is called), then the text field (``text``/``context``: generic,
  ``input``: WikiMIA, ``snippet``: BookMIA). ``format=...`` overrides detection.
* A Hugging Face hub name (``"swj0419/WikiMIA"`` with ``split="WikiMIA_length64"``,
  ``"swj0419/BookMIA"``) when the optional package ``datasets`` is installed.

``<index>`` is the 0-based position of the record in its file or list (the hub row index).
``Document.line`` is the 1-based line in JSONL/TXT files, the line a CSV row starts on, and
the 1-based position of the element for JSON arrays and hub rows.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, NamedTuple

from mnemoscope.data.records import RecordError, parse_label
from mnemoscope.errors import InputError

__all__ = ["FORMATS", "Document", "check_binary_labels", "load_documents", "truncate_documents"]

FORMATS = ("auto", "jsonl", "wikimia", "bookmia", "mimir")
_TEXT_FIELDS = {
    "jsonl": ("text", "context"),
    "wikimia": ("input",),
    "bookmia": ("snippet", "input", "text"),
    "mimir": ("text",),
}
_SIGNATURES = {"jsonl": {"text", "context"}, "wikimia": {"input"}, "bookmia": {"snippet"}}
# fields only one format has: they decide before the text field does (a BookMIA export whose
# text column is called "input" is still BookMIA)
_DISTINGUISHING = {"bookmia": {"book", "book_id", "snippet_id"}}
_MIMIR_NAMES = ((1, ("member", "members")), (0, ("nonmember", "nonmembers")))
_FILE_SUFFIXES = {".jsonl", ".json", ".csv", ".txt", ".tsv", ".gz"}
_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
_HUB_HINT = "pass a local file (JSONL, JSON or CSV) instead"


@dataclass(frozen=True)
class Document:
    """One membership document. ``label``: 1 = member, 0 = non-member, None = unlabelled."""

    id: str
    text: str
    label: int | None
    line: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)


class _Invalid(NamedTuple):  # a raw item that could not be parsed (invalid JSON, bad CSV row)
    message: str


class _Part(NamedTuple):
    items: Iterable[tuple[int, Any]]  # (line, parsed object or _Invalid)
    label: int | None = None  # fixed label (MIMIR)
    prefix: str | None = None  # default id prefix (MIMIR)
    cap: int | None = None


def load_documents(
    path_or_name: str | os.PathLike[str],
    *,
    format: str = "auto",
    split: str | None = None,
    on_error: Literal["skip", "raise"] = "skip",
    min_chars: int = 1,
    max_docs: int | None = None,
) -> tuple[list[Document], list[RecordError]]:
    """Load a membership dataset from a file, a MIMIR folder or the Hugging Face hub.

    Args:
        path_or_name: a JSONL/JSON/CSV file, a MIMIR folder or a hub dataset name.
        format: one of :data:`FORMATS` (see the module docstring for the field names).
        split: the hub split (e.g. ``"WikiMIA_length64"``); only for hub datasets.
        on_error: ``"skip"`` returns bad records as :class:`RecordError` and loads the rest;
            ``"raise"`` raises :class:`InputError` at the first.
        min_chars: texts shorter than this (and blank texts) are errors.
        max_docs: keep at most this many valid documents (for MIMIR, half from each list).

    Returns:
        (documents, errors), both in reading order. Errors: invalid JSON, missing or
        non-string text, empty or too-short text, non-binary label, duplicate id.
    """
    if format not in FORMATS:
        raise InputError(f"unknown dataset format {format!r}; expected one of {', '.join(FORMATS)}")
    if on_error not in ("skip", "raise"):
        raise InputError(f"on_error must be 'skip' or 'raise', got {on_error!r}")
    if max_docs is not None and max_docs < 1:
        raise InputError(f"max_docs must be >= 1, got {max_docs}")
    path = Path(path_or_name)
    if path.exists():
        if split is not None:
            raise InputError(f"split={split!r} only applies to hub datasets; {path} is a local path")
        source = str(path)
        fmt, parts = _read_folder(path, format) if path.is_dir() else _read_file(path, format)
    elif (
        isinstance(path_or_name, str) and _HUB_NAME.match(path_or_name) and path.suffix not in _FILE_SUFFIXES
    ):
        source = path_or_name + (f" [{split}]" if split else "")
        fmt, parts = _read_hub(path_or_name, split, format)
    else:
        raise InputError(f"dataset not found: {path_or_name} (not a file, a folder or a hub name 'org/name')")
    if max_docs is not None:
        if fmt == "mimir" and len(parts) == 2:
            parts = [parts[0]._replace(cap=(max_docs + 1) // 2), parts[1]._replace(cap=max_docs // 2)]
        else:
            parts = [p._replace(cap=max_docs) for p in parts]
    return _collect(parts, fmt, source, on_error, min_chars)


def check_binary_labels(docs: Sequence[Document]) -> tuple[int, int]:
    """Return (n_pos, n_neg); raise :class:`InputError` if a label is missing or one class is absent."""
    unlabelled = [d.id for d in docs if d.label is None]
    if unlabelled:
        raise InputError(f"{len(unlabelled)} document(s) have no label (first: {unlabelled[0]})")
    n_pos = sum(1 for d in docs if d.label == 1)
    n_neg = len(docs) - n_pos
    if n_pos == 0 or n_neg == 0:
        raise InputError(f"single-class dataset: AUC is undefined (n_pos={n_pos}, n_neg={n_neg})")
    return n_pos, n_neg


def truncate_documents(
    docs: Sequence[Document],
    tokenizer: Any,
    max_tokens: int,
    policy: Literal["truncate", "reject"] = "truncate",
) -> tuple[list[Document], list[RecordError]]:
    """Enforce a token budget on each document's text (its own tokens, no special tokens).

    ``"truncate"``: a longer text becomes ``tokenizer.decode`` of its first ``max_tokens``
    ids (``meta["truncated_from_tokens"]`` holds the original count) and a warning entry is
    returned for it. ``"reject"``: a longer document is dropped and returned as a
    :class:`RecordError` with field ``"text"``. Returns (kept documents, entries).
    """
    if policy not in ("truncate", "reject"):
        raise InputError(f"policy must be 'truncate' or 'reject', got {policy!r}")
    if max_tokens < 1:
        raise InputError(f"max_tokens must be >= 1, got {max_tokens}")
    if not docs:
        return [], []
    all_ids = tokenizer([d.text for d in docs], add_special_tokens=False)["input_ids"]
    kept: list[Document] = []
    entries: list[RecordError] = []
    for doc, ids in zip(docs, all_ids, strict=True):
        n = len(ids)
        if n <= max_tokens:
            kept.append(doc)
            continue
        line = doc.line if doc.line is not None else 0
        if policy == "reject":
            entries.append(
                RecordError(line, doc.id, "text", f"has {n} tokens, more than max_tokens={max_tokens}")
            )
            continue
        text = tokenizer.decode(ids[:max_tokens])
        kept.append(replace(doc, text=text, meta={**doc.meta, "truncated_from_tokens": n}))
        entries.append(RecordError(line, doc.id, "text", f"truncated from {n} to {max_tokens} tokens"))
    return kept, entries


# --- reading ------------------------------------------------------------------------------


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")  # drops a byte-order mark
    except UnicodeDecodeError as e:
        raise InputError(f"{path} is not valid UTF-8 ({e.reason} at byte {e.start})") from e


def _jsonl_items(text: str) -> Iterator[tuple[int, Any]]:
    for lineno, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            yield lineno, json.loads(raw)
        except json.JSONDecodeError as e:
            yield lineno, _Invalid(f"invalid JSON: {e.msg} (column {e.colno})")


def _csv_items(text: str) -> Iterator[tuple[int, Any]]:
    reader = csv.reader(io.StringIO(text))
    header: list[str] | None = None
    end = 0
    for row in reader:
        start, end = end + 1, reader.line_num
        if not row or not any(cell.strip() for cell in row):
            continue
        if header is None:
            header = [h.strip() for h in row]
        elif len(row) != len(header):
            yield start, _Invalid(f"CSV row has {len(row)} columns, the header has {len(header)}")
        else:
            yield start, dict(zip(header, row, strict=True))


def _detect(keys: Iterable[str], source: str) -> str:
    keyset = set(keys)
    if {"member", "nonmember"} <= keyset:
        return "mimir"
    marked = [fmt for fmt, sig in _DISTINGUISHING.items() if sig & keyset]
    if len(marked) == 1:
        return marked[0]
    found = [fmt for fmt, sig in _SIGNATURES.items() if sig & keyset]
    if len(found) == 1:
        return found[0]
    if found:
        raise InputError(
            f"ambiguous dataset format for {source}: keys {sorted(keyset)} match {' and '.join(found)}; "
            "pass format=..."
        )
    raise InputError(
        f"cannot detect the dataset format of {source}: the first record has keys {sorted(keyset)}; expected "
        "'text'/'context' (jsonl), 'input' (wikimia), 'snippet' (bookmia) or 'member'/'nonmember' "
        "(mimir); pass format=..."
    )


def _first_keys(items: list[tuple[int, Any]], source: str) -> list[str]:
    for _, obj in items:
        if isinstance(obj, dict):
            return list(obj)
    raise InputError(
        f"cannot detect the dataset format of {source}: it has no JSON object record; pass format=..."
    )


def _read_file(path: Path, fmt: str) -> tuple[str, list[_Part]]:
    text = _read_text(path)
    head = text.lstrip()[:1]
    items: list[tuple[int, Any]]
    if path.suffix.lower() == ".csv":
        items = list(_csv_items(text))
    elif head == "[":
        try:
            array = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}: invalid JSON array at line {e.lineno}: {e.msg}") from e
        items = [(i + 1, obj) for i, obj in enumerate(array)]
    else:
        whole = None
        if head == "{":
            try:
                whole = json.loads(text)
            except json.JSONDecodeError:
                whole = None  # JSON Lines
        if isinstance(whole, dict) and fmt in ("auto", "mimir") and {"member", "nonmember"} <= set(whole):
            return "mimir", _mimir_lists(whole, str(path))
        items = [(1, whole)] if isinstance(whole, dict) else list(_jsonl_items(text))
    if fmt == "auto":
        fmt = _detect(_first_keys(items, str(path)), str(path))
    if fmt == "mimir":
        raise InputError(
            f"{path}: MIMIR needs a folder with member/nonmember files or a JSON object "
            '{"member": [...], "nonmember": [...]}'
        )
    return fmt, [_Part(items)]


def _mimir_lists(obj: Mapping[str, Any], source: str) -> list[_Part]:
    parts = []
    for label, (name, _) in _MIMIR_NAMES:
        values = obj[name]
        if not isinstance(values, list):
            raise InputError(f"{source}: '{name}' must be a list, got {type(values).__name__}", field=name)
        parts.append(_Part([(i + 1, v) for i, v in enumerate(values)], label, name))
    return parts


def _read_folder(path: Path, fmt: str) -> tuple[str, list[_Part]]:
    if fmt not in ("auto", "mimir"):
        raise InputError(f"{path} is a folder; only the 'mimir' format reads folders (got format={fmt!r})")
    parts = []
    for label, names in _MIMIR_NAMES:
        found = [
            path / f"{n}{ext}" for n in names for ext in (".jsonl", ".txt") if (path / f"{n}{ext}").is_file()
        ]
        if len(found) != 1:
            problem = "several candidates: " + ", ".join(f.name for f in found) if found else "none found"
            raise InputError(
                f"{path}: expected one {names[0]} file ({names[0]}.jsonl, {names[1]}.jsonl or .txt); {problem}"
            )
        text = _read_text(found[0])
        if found[0].suffix == ".txt":
            items: Iterable[tuple[int, Any]] = [
                (i, raw) for i, raw in enumerate(text.split("\n"), start=1) if raw.strip()
            ]
        else:
            items = _jsonl_items(text)
        parts.append(_Part(items, label, names[0]))
    return "mimir", parts


def _read_hub(name: str, split: str | None, fmt: str) -> tuple[str, list[_Part]]:
    try:
        import datasets  # optional dependency
    except ImportError as e:
        raise InputError(
            "loading hub datasets needs the optional package 'datasets' (pip install datasets); or pass a local file"
        ) from e
    where = f"'{name}'" + (f" (split {split!r})" if split else "")
    try:
        ds = datasets.load_dataset(name, split=split)
    except Exception as e:
        if any(os.environ.get(v, "").lower() in ("1", "true", "yes", "on") for v in _OFFLINE_VARS):
            raise InputError(
                f"cannot load hub dataset {where}: HF_HUB_OFFLINE is set and it is not in the local cache; {_HUB_HINT}"
            ) from e
        reason = (str(e).strip().splitlines() or [""])[0][:300]
        raise InputError(
            f"cannot load hub dataset {where}: {type(e).__name__}: {reason}; if the hub is unreachable, {_HUB_HINT}"
        ) from e
    if isinstance(ds, Mapping):  # a DatasetDict: split=None
        if len(ds) != 1:
            raise InputError(f"hub dataset '{name}' has splits {', '.join(ds)}; pass split=...")
        ds = next(iter(ds.values()))
    rows = [(i + 1, row) for i, row in enumerate(ds)]
    if fmt == "auto":
        fmt = _detect(_first_keys(rows, name), name)
    if fmt == "mimir":
        columns = {n: [row.get(n) for _, row in rows] for n in ("member", "nonmember")}
        return fmt, _mimir_lists(columns, name)
    return fmt, [_Part(rows)]


# --- validation ---------------------------------------------------------------------------


def _record_id(obj: Any, fmt: str, line: int, index: int, prefix: str | None) -> str:
    if fmt in ("wikimia", "bookmia"):
        return f"{fmt}-{index}"
    raw = obj.get("id") if isinstance(obj, dict) else None
    if raw is None:
        return f"L{line}" if fmt == "jsonl" else f"{prefix}-{index}"
    if not isinstance(raw, (str, int)) or isinstance(raw, bool) or not str(raw).strip():
        raise InputError("id must be a non-empty string or an integer", field="id")
    return str(raw)


def _parse(obj: Any, rid: str, fmt: str, part: _Part, min_chars: int, line: int) -> Document:
    if part.label is not None and isinstance(obj, str):
        obj = {"text": obj}
    if not isinstance(obj, dict):
        raise InputError(f"expected a JSON object, got {type(obj).__name__}")
    names = _TEXT_FIELDS[fmt]
    key = next((k for k in names if obj.get(k) is not None), None)
    if key is None:
        expected = " or ".join(f"'{k}'" for k in names)
        raise InputError(f"missing field (expected {expected})", field=names[0])
    text = obj[key]
    if not isinstance(text, str):
        raise InputError(f"must be a string, got {type(text).__name__}", field=key)
    if not text.strip():
        raise InputError("is empty", field=key)
    if len(text) < min_chars:
        raise InputError(f"has {len(text)} characters, fewer than min_chars={min_chars}", field=key)
    raw_label = obj.get("label")
    if part.label is not None:
        label: int | None = part.label
        if raw_label not in (None, "") and parse_label(raw_label) != label:
            raise InputError(f"label {raw_label!r} contradicts its '{part.prefix}' list", field="label")
    elif raw_label is None or raw_label == "":
        if fmt != "jsonl":
            raise InputError("missing field", field="label")
        label = None
    else:
        label = parse_label(raw_label)
    skip = {key, "label"} | ({"id"} if fmt in ("jsonl", "mimir") else set())
    meta = {k: v for k, v in obj.items() if k not in skip}
    return Document(id=rid, text=text, label=label, line=line, meta=meta)


def _collect(
    parts: list[_Part], fmt: str, source: str, on_error: str, min_chars: int
) -> tuple[list[Document], list[RecordError]]:
    docs: list[Document] = []
    errors: list[RecordError] = []
    seen: dict[str, int] = {}

    def fail(err: RecordError) -> None:
        if on_error == "raise":
            exc = InputError(f"{source}: {err}")
            exc.record, exc.field = (err.id if err.id is not None else err.line), err.field
            raise exc
        errors.append(err)

    for part in parts:
        n_kept = 0
        for index, (line, obj) in enumerate(part.items):
            if part.cap is not None and n_kept >= part.cap:
                break
            if isinstance(obj, _Invalid):
                fail(RecordError(line, None, None, obj.message))
                continue
            rid: str | None = None
            try:
                rid = _record_id(obj, fmt, line, index, part.prefix)
                doc = _parse(obj, rid, fmt, part, min_chars, line)
            except InputError as e:
                fail(RecordError(line, rid, e.field, e.reason))
                continue
            if doc.id in seen:
                fail(RecordError(line, doc.id, "id", f"duplicate id (first seen on line {seen[doc.id]})"))
                continue
            seen[doc.id] = line
            docs.append(doc)
            n_kept += 1
    return docs, errors
