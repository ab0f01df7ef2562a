"""bench verify: the keep/drop rule, on a tiny model with forced answer checks."""

from __future__ import annotations

import json

import pytest

from mnemoscope.bench.verify import verify_reliance
from mnemoscope.trace import PairConfig


def test_keep_rule(lm, tmp_path, monkeypatch):
    import mnemoscope.bench.reliance as rel

    items = [
        {"id": "m-ok", "kind": "memorized", "label": 1, "context": "c1", "query": "q1", "answer": "A"},
        {"id": "m-bad", "kind": "memorized", "label": 1, "context": "c2", "query": "q2", "answer": "B"},
        {"id": "c-ok", "kind": "clean", "label": 0, "context": "c3", "query": "q3", "answer": "C"},
        {"id": "c-known", "kind": "clean", "label": 0, "context": "c4", "query": "q4", "answer": "D"},
        {"id": "c-unread", "kind": "clean", "label": 0, "context": "c5", "query": "q5", "answer": "E"},
    ]
    # (closed-book correct, open-book correct) per item, decided by which answer is checked
    truth = {
        "A": (True, True),
        "B": (False, True),
        "C": (False, True),
        "D": (True, True),
        "E": (False, False),
    }
    calls: dict[str, int] = {}

    def fake(generation, item):
        n = calls.get(item["id"], 0)
        calls[item["id"]] = n + 1
        return truth[item["answer"]][n % 2]  # first call: closed-book, second: open-book

    monkeypatch.setattr(rel, "answer_matches", fake)
    res = verify_reliance(
        lm, items, tmp_path, PairConfig(max_new_tokens=3, answer_without=True), progress=False
    )
    kept = [json.loads(x)["id"] for x in (tmp_path / "verified.jsonl").read_text().splitlines()]
    assert kept == ["m-ok", "c-ok"]
    assert res["by_kind"] == {"clean": {"total": 3, "kept": 1}, "memorized": {"total": 2, "kept": 1}}
    row = json.loads((tmp_path / "verified.jsonl").read_text().splitlines()[0])
    assert {"closed_book_answer", "open_book_answer", "closed_book_correct", "open_book_correct"} <= set(row)
    with pytest.raises(ValueError, match="answer_without"):
        verify_reliance(lm, items, tmp_path / "x", PairConfig(max_new_tokens=3, answer_without=False))
