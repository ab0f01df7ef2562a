"""JSONL records: label mapping, per-line errors, default queries."""

from __future__ import annotations

import json

import pytest

from mnemoscope.data import parse_label, read_records
from mnemoscope.errors import InputError


def _write(tmp_path, lines):
    p = tmp_path / "in.jsonl"
    p.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return p


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (1, 1),
        (0, 0),
        (True, 1),
        (False, 0),
        (1.0, 1),
        ("1", 1),
        ("0", 0),
        ("member", 1),
        ("Non-Member", 0),
        ("memorized", 1),
        ("clean", 0),
        ("recall", 1),
        ("reasoning", 0),
        ("contaminated", 1),
        (" NONMEMBER ", 0),
    ],
)
def test_parse_label(raw, expected):
    assert parse_label(raw) == expected


@pytest.mark.parametrize("raw", [2, -1, 0.5, "maybe", "memberish", [1], float("nan")])
def test_parse_label_rejects(raw):
    with pytest.raises(InputError, match="label"):
        parse_label(raw, record="r1")


def test_bad_lines_are_reported_with_line_and_field(tmp_path):
    path = _write(
        tmp_path,
        [
            {"id": "ok1", "context": "c", "query": "q", "label": "member"},
            "{not json",
            {"id": "nq", "context": "c"},
            {"id": "badq", "context": "c", "query": 5},
            {"id": "emptyq", "context": "c", "query": "  "},
            {"context": "c", "query": "q"},
            {"id": "lab", "context": "c", "query": "q", "label": "perhaps"},
            {"id": "ok1", "context": "c", "query": "q"},
            "",
            {"id": 7, "context": "", "query": "q", "label": 0, "source": "wiki"},
            [1, 2],
        ],
    )
    records, errors = read_records(path)
    assert [r.id for r in records] == ["ok1", "7"]
    assert records[1].extra == {"source": "wiki"} and records[1].label == 0 and records[1].line == 10
    got = {(e.line, e.field) for e in errors}
    assert got == {
        (2, None),
        (3, "query"),
        (4, "query"),
        (5, "query"),
        (6, "id"),
        (7, "label"),
        (8, "id"),
        (11, None),
    }
    msgs = {e.line: str(e) for e in errors}
    assert "invalid JSON" in msgs[2]
    assert "--default-query" in msgs[3]
    assert "duplicate id" in msgs[8] and "line 1" in msgs[8]
    with pytest.raises(InputError, match=r"line 2: invalid JSON"):
        read_records(path, on_error="raise")


def test_default_query_is_first_100_chars(tmp_path):
    ctx = "A" * 150
    path = _write(tmp_path, [{"id": "d", "context": ctx}, {"id": "e", "context": ""}])
    records, errors = read_records(path, default_query=True)
    assert records[0].query == ctx[:100] and records[0].query_defaulted
    assert errors[0].field == "query" and "context is empty" in errors[0].message


def test_require_label_and_missing_file(tmp_path):
    path = _write(tmp_path, [{"id": "a", "context": "c", "query": "q"}])
    _, errors = read_records(path, require_label=True)
    assert errors[0].field == "label"
    with pytest.raises(InputError, match="not found"):
        read_records(tmp_path / "nope.jsonl")
