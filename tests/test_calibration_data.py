"""The shipped calibration set (src/mnemoscope/bench/data/calibration.jsonl): schema, answers, counts."""

from __future__ import annotations

import importlib.util
import re
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from mnemoscope.bench.calibration_data import (
    KINDS,
    LABELS,
    SHIPPED_SPEC,
    default_path,
    load_calibration_items,
    resolve_shipped,
)
from mnemoscope.bench.reliance import answer_matches
from mnemoscope.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "benchmarks" / "data" / "build_calibration_set.py"

# The counts docs/data.md states (kind -> difficulty -> n; clean items have no difficulty).
COUNTS = {
    "memorized": {1: 325, 2: 377, 3: 326},
    "memorized_paraphrased": {1: 325, 2: 377, 3: 326},
    "clean": {None: 478},
    "conflict": {1: 324, 2: 177},
}

FIELDS = {
    "id": str,
    "fact_id": str,
    "kind": str,
    "category": str,
    "subject": str,
    "context": str,
    "query": str,
    "answer": str,
    "aliases": list,
}


@pytest.fixture(scope="module")
def items() -> list[dict[str, Any]]:
    return load_calibration_items()


def _norm(text: str) -> str:
    plain = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    return " ".join(re.findall(r"[a-z0-9]+", plain))


def test_schema_and_unique_ids(items: list[dict[str, Any]]) -> None:
    ids = [it["id"] for it in items]
    assert len(ids) == len(set(ids))
    for it in items:
        for name, typ in FIELDS.items():
            assert isinstance(it.get(name), typ), (it["id"], name)
        assert it["id"].startswith("cal-") and it["fact_id"].startswith("cal-"), it["id"]
        assert it["kind"] in KINDS, it["id"]
        assert it["label"] == LABELS[it["kind"]], it["id"]
        assert it["context"].strip() and it["query"].strip() and it["answer"].strip(), it["id"]
        assert all(isinstance(a, str) and a.strip() for a in it["aliases"]), it["id"]
        if it["kind"] == "clean":
            assert it["difficulty"] is None, it["id"]
        else:
            assert it["difficulty"] in (1, 2, 3), it["id"]
        if it["kind"] == "conflict":
            assert isinstance(it["context_answer"], str) and it["context_answer"].strip(), it["id"]
            assert isinstance(it["context_aliases"], list), it["id"]
        else:
            assert "context_answer" not in it, it["id"]


def test_counts_as_documented(items: list[dict[str, Any]]) -> None:
    got: dict[str, Counter[int | None]] = {}
    for it in items:
        got.setdefault(it["kind"], Counter())[it["difficulty"]] += 1
    assert {k: dict(v) for k, v in got.items()} == COUNTS
    facts = {it["fact_id"] for it in items if it["kind"] == "memorized"}
    assert len(facts) >= 600
    assert COUNTS["memorized"][1] >= 250 and COUNTS["clean"][None] >= 400
    assert sum(COUNTS["conflict"].values()) >= 200
    # many domains, each with real facts; every category of invented facts also has real ones
    real_cats = {it["category"] for it in items if it["kind"] == "memorized"}
    clean_cats = {it["category"] for it in items if it["kind"] == "clean"}
    assert len(real_cats) >= 20 and clean_cats <= real_cats and len(clean_cats) >= 20


def test_memory_and_clean_contexts_state_the_answer(items: list[dict[str, Any]]) -> None:
    bad = [it["id"] for it in items if it["kind"] != "conflict" and not answer_matches(it["context"], it)]
    assert bad == []


def test_conflict_contexts_state_the_counterfactual_only(items: list[dict[str, Any]]) -> None:
    memorized = {it["fact_id"]: it for it in items if it["kind"] == "memorized"}
    for it in items:
        if it["kind"] != "conflict":
            continue
        decoy = {"answer": it["context_answer"], "aliases": it["context_aliases"]}
        assert answer_matches(it["context"], decoy), it["id"]
        assert not answer_matches(it["context"], it), it["id"]
        assert not answer_matches(it["context_answer"], it), it["id"]
        real = memorized[it["fact_id"]]  # the fact it contradicts, same fact_id, same query and answer
        assert (real["query"], real["answer"], real["difficulty"]) == (
            it["query"],
            it["answer"],
            it["difficulty"],
        )
        assert it["difficulty"] in (1, 2)


def test_paraphrases_differ_and_share_the_fact(items: list[dict[str, Any]]) -> None:
    by_fact: dict[str, dict[str, dict[str, Any]]] = {}
    for it in items:
        by_fact.setdefault(it["fact_id"], {})[it["kind"]] = it
    n = 0
    for group in by_fact.values():
        if "memorized" not in group:
            continue
        mem, para = group["memorized"], group["memorized_paraphrased"]
        assert para["query"] != mem["query"], mem["id"]
        assert (para["context"], para["answer"], para["aliases"]) == (
            mem["context"],
            mem["answer"],
            mem["aliases"],
        )
        n += 1
    assert n == COUNTS["memorized"][1] + COUNTS["memorized"][2] + COUNTS["memorized"][3]


def test_invented_entities_are_not_real_answers(items: list[dict[str, Any]]) -> None:
    real: set[str] = set()
    for it in items:
        if it["kind"] in ("memorized", "conflict"):
            real.update(_norm(x) for x in (it["answer"], *it["aliases"], it["subject"]))
    clean = [it for it in items if it["kind"] == "clean"]
    for it in clean:
        assert _norm(it["answer"]) not in real, it["id"]
        assert _norm(it["subject"]) not in real, it["id"]
    # invented answers are not reused: a model cannot learn them from one another
    answers = Counter(_norm(it["answer"]) for it in clean if not it["answer"].isdigit())
    assert max(answers.values()) == 1


def test_loader_filters_and_shipped_spec() -> None:
    mem1 = load_calibration_items(kinds=["memorized"], max_difficulty=1)
    assert len(mem1) == COUNTS["memorized"][1] and all(it["difficulty"] == 1 for it in mem1)
    upto2 = load_calibration_items(kinds=("memorized", "clean"), max_difficulty=2)
    assert Counter(it["kind"] for it in upto2) == {
        "memorized": COUNTS["memorized"][1] + COUNTS["memorized"][2],
        "clean": COUNTS["clean"][None],
    }
    assert resolve_shipped(SHIPPED_SPEC) == str(default_path()) and default_path().is_file()
    assert resolve_shipped("mine.jsonl") == "mine.jsonl"
    with pytest.raises(InputError, match="unknown calibration kind"):
        load_calibration_items(kinds=["memorised"])
    with pytest.raises(InputError, match="max_difficulty"):
        load_calibration_items(max_difficulty=4)


@pytest.mark.skipif(not BUILD.is_file(), reason="benchmarks/ is not in this source tree")
def test_shipped_file_is_what_the_tables_build() -> None:
    spec = importlib.util.spec_from_file_location("build_calibration_set", BUILD)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.dumps(mod.build_records()) == default_path().read_text(encoding="utf-8")


def _measure_module() -> Any:
    path = ROOT / "benchmarks" / "data" / "measure_calibration_set.py"
    spec = importlib.util.spec_from_file_location("measure_calibration_set", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(not BUILD.is_file(), reason="benchmarks/ is not in this source tree")
def test_measurement_rules_and_stratified_order(items: list[dict[str, Any]]) -> None:
    m = _measure_module()
    by_id = {it["id"]: it for it in items}
    mem, clean, conf = (
        by_id["cal-mem-capital-france"],
        next(it for it in items if it["kind"] == "clean"),
        by_id["cal-conf-capital-france"],
    )
    assert m.outcome(mem, "Paris.", "It is Paris.")["kept"]
    assert not m.outcome(mem, "Paris.", "I do not know.")["kept"]  # memory needs the open-book answer too
    assert m.outcome(mem, "Paris.", "I do not know.")["kept_closed_only"]
    assert m.outcome(clean, "I do not know.", f"It is {clean['answer']}.")["kept"]
    assert not m.outcome(clean, clean["answer"], clean["answer"])["kept"]
    assert m.outcome(conf, "Paris", "The capital is Lyon.")["outcome"] == "follows_context"
    assert m.outcome(conf, "Paris", "Paris, not Lyon.")["outcome"] == "both"
    assert m.outcome(conf, "Paris", "It is Paris.")["outcome"] == "states_known"
    assert m.outcome(conf, "Paris", "Marseille")["outcome"] == "neither"
    order = m.answering_order(items)
    assert sorted(it["id"] for it in order) == sorted(by_id)
    head = Counter(m.stratum(it) for it in order[:400])  # any prefix is a sample of every stratum
    assert set(head) == set(m.STRATA) and head["clean"] > head["conflict d2"]
    rows = {it["id"]: m.outcome(it, "", it["answer"]) for it in order[:200] if it["kind"] != "conflict"}
    summary = m.summarise(items, rows)
    assert summary["kept_clean_answers"] == sum(it["kind"] == "clean" for it in order[:200])
    assert summary["kept_memory_answers"] == 0  # nothing answered closed-book
