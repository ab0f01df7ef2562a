"""The token-level ground truth: mixed items (one part from the context, one from memory)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from mnemoscope.bench.mixed import build_mixed, find_part, load_mixed, verify_mixed
from mnemoscope.bench.reliance import load_reliance
from mnemoscope.trace import PairConfig, PromptBuilder


def test_shipped_mixed_set_is_the_generator_output_and_valid() -> None:
    shipped = load_mixed()
    assert shipped == build_mixed(load_reliance())  # deterministic: regenerating changes nothing
    assert len(shipped) >= 160 and len({r["id"] for r in shipped}) == len(shipped)
    assert len({(r["clean_id"], r["memorized_id"]) for r in shipped}) == len(shipped)
    for r in shipped:
        assert re.search(re.escape(r["answer_context"]), r["context"], re.IGNORECASE), r["id"]
        assert r["answer_memory"].lower() not in r["context"].lower(), r["id"]
        assert r["query"].count("?") in (1, 2) and r["expected_source"] == "mixed"
    assert {r["phrasing"] for r in shipped} == {0, 1, 2}
    assert len({r["category_memory"] for r in shipped}) >= 4


def test_find_part_whole_words_and_aliases() -> None:
    part = {"answer": "60", "aliases": ["sixty"]}
    assert find_part("There are sixty minutes.", part) == (10, 15)
    assert find_part("It is 160.", part) is None
    assert find_part("Paris and Zorblat", {"answer": "zorblat", "aliases": []}) == (10, 17)


def test_verify_mixed_reports_every_outcome(lm: Any, tmp_path: Path) -> None:
    items = load_mixed()[:6]
    cfg = PairConfig(builder=PromptBuilder(chat=False), max_new_tokens=4, answer_without=True)
    res = verify_mixed(
        lm, items, tmp_path / "v", cfg, memorized_ids=[items[0]["memorized_id"]], progress=False
    )
    assert sum(res["outcomes"].values()) == len(items)
    assert res["outcomes"].get("memorized fact not known closed-book", 0) >= len(items) - 1 - sum(
        1 for it in items[1:] if it["memorized_id"] == items[0]["memorized_id"]
    )
    out = tmp_path / "v"
    assert (out / "verified.jsonl").is_file() and json.loads((out / "verify.json").read_text())["rule"]
    with pytest.raises(ValueError, match="closed-book"):
        verify_mixed(
            lm, items, tmp_path / "w", PairConfig(max_new_tokens=2, answer_without=False), progress=False
        )
