"""The context-reliance benchmark: deterministic, balanced, answerable open-book, and scored correctly."""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
from collections import Counter
from importlib import resources

import pytest

from mnemoscope.bench import reliance
from mnemoscope.bench.corpus import to_jsonl
from mnemoscope.bench.reliance import (
    CATEGORIES,
    KINDS,
    LABELS,
    RELIANCE_FILE,
    answer_matches,
    generate_reliance,
    load_reliance,
)

_PER_KIND = 150
_PER_CATEGORY = {"capital": 60, "author": 30, "element": 25, "misc": 35}
_FIELDS = ["id", "kind", "label", "fact_id", "category", "context", "query", "answer", "aliases"]


def _shipped_bytes() -> bytes:
    return (resources.files("mnemoscope.bench") / "data" / RELIANCE_FILE).read_bytes()


@pytest.fixture(scope="module")
def items():
    return load_reliance()


def _of(items, kind):
    return [item for item in items if item["kind"] == kind]


# --- determinism ------------------------------------------------------------------------


def test_regenerating_reproduces_the_shipped_file_line_for_line():
    shipped = _shipped_bytes().decode("utf-8").splitlines()
    fresh = to_jsonl(generate_reliance()).splitlines()
    assert len(fresh) == len(shipped) == 3 * _PER_KIND
    for i, (a, b) in enumerate(zip(fresh, shipped, strict=True)):
        assert a == b, f"line {i + 1} differs from the generator"


def test_main_writes_a_byte_identical_file(tmp_path, capsys):
    assert reliance.main(["--out", str(tmp_path)]) == 0
    assert (tmp_path / RELIANCE_FILE).read_bytes() == _shipped_bytes()
    out = capsys.readouterr().out
    assert "450 records" in out
    assert "clean: 150 (capital 60, author 30, element 25, misc 35)" in out


def test_load_reliance_returns_the_generated_records(items):
    assert items == generate_reliance(0)


def test_the_seed_changes_wording_and_invented_names_but_not_the_facts_or_the_shape():
    a, b = generate_reliance(0), generate_reliance(1)
    assert generate_reliance(0) == a
    mem_a, mem_b = _of(a, "memorized"), _of(b, "memorized")
    assert mem_a == mem_b  # the hand-written facts and their questions do not depend on the seed
    assert [i["query"] for i in _of(a, "memorized_paraphrased")] != [
        i["query"] for i in _of(b, "memorized_paraphrased")
    ]
    assert [i["answer"] for i in _of(a, "clean")] != [i["answer"] for i in _of(b, "clean")]
    assert Counter((i["kind"], i["category"]) for i in a) == Counter((i["kind"], i["category"]) for i in b)


def test_the_global_random_state_is_neither_used_nor_disturbed():
    import random

    random.seed(123)
    before = random.getstate()
    first = generate_reliance(0)
    assert random.getstate() == before
    random.seed(999)
    assert generate_reliance(0) == first


def test_importing_the_module_does_not_import_torch():
    code = "import sys, mnemoscope.bench.reliance; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


# --- shape ------------------------------------------------------------------------------


def test_counts_per_kind_label_and_category(items):
    assert Counter(i["kind"] for i in items) == {kind: _PER_KIND for kind in KINDS}
    assert Counter(i["label"] for i in items) == {1: 2 * _PER_KIND, 0: _PER_KIND}
    for kind in KINDS:
        assert {i["label"] for i in _of(items, kind)} == {LABELS[kind]}
        assert Counter(i["category"] for i in _of(items, kind)) == _PER_CATEGORY
    assert set(_PER_CATEGORY) == set(CATEGORIES)


def test_schema_ids_and_fact_ids(items):
    prefix = {"memorized": "rel-mem", "memorized_paraphrased": "rel-para", "clean": "rel-clean"}
    for item in items:
        assert list(item) == _FIELDS
        assert re.fullmatch(rf"{prefix[item['kind']]}-\d{{3}}", item["id"]), item["id"]
        expected_fact = r"clean-\d{3}" if item["kind"] == "clean" else r"fact-\d{3}"
        assert re.fullmatch(expected_fact, item["fact_id"]), item
        for field in ("context", "query", "answer"):
            assert isinstance(item[field], str) and item[field].strip() == item[field] != ""
            assert item[field].isascii() and "{" not in item[field]
        assert isinstance(item["aliases"], list) and all(isinstance(a, str) and a for a in item["aliases"])
        assert item["query"].endswith(("?", "."))
        assert item["context"].endswith(".")
    assert len({i["id"] for i in items}) == len(items)
    assert len({i["fact_id"] for i in _of(items, "memorized")}) == _PER_KIND
    assert len({i["fact_id"] for i in _of(items, "clean")}) == _PER_KIND
    assert len({i["query"] for i in items}) == len(items)
    assert _shipped_bytes().isascii() and _shipped_bytes().endswith(b"\n")


def test_each_paraphrase_pairs_with_exactly_one_memorized_item(items):
    memorized = _of(items, "memorized")
    for para in _of(items, "memorized_paraphrased"):
        twins = [m for m in memorized if m["fact_id"] == para["fact_id"]]
        assert len(twins) == 1, para["id"]
        twin = twins[0]
        assert twin["id"].split("-")[-1] == para["id"].split("-")[-1]
        assert (twin["answer"], twin["context"], twin["aliases"], twin["category"]) == (
            para["answer"],
            para["context"],
            para["aliases"],
            para["category"],
        )
        assert para["query"] != twin["query"]
        assert para["query"].lower().rstrip("?.") != twin["query"].lower().rstrip("?.")


# --- content ----------------------------------------------------------------------------


def test_every_item_is_answerable_from_its_context(items):
    for item in items:
        assert answer_matches(item["context"], item), item["id"]
        if item["kind"] == "clean":
            assert item["answer"] in item["context"], item["id"]  # verbatim


def test_no_query_gives_its_answer_away(items):
    for item in items:
        assert not answer_matches(item["query"], item), item["id"]


def test_clean_answers_occur_in_no_memorized_context(items):
    memorized = _of(items, "memorized")
    leaks = [
        (clean["id"], mem["id"])
        for clean in _of(items, "clean")
        for mem in memorized
        if answer_matches(mem["context"], clean) or answer_matches(mem["answer"], clean)
    ]
    assert leaks == []


def test_clean_answers_and_invented_subjects_are_distinct(items):
    clean = _of(items, "clean")
    answers = [i["answer"].lower() for i in clean]
    assert len(set(answers)) == len(answers)
    # Each clean answer belongs to its own item only: no other clean context states it.
    for item in clean:
        others = [o["id"] for o in clean if o is not item and answer_matches(o["context"], item)]
        assert others == [], (item["id"], others)


def test_invented_element_symbols_are_not_real_symbols_or_the_first_two_letters(items):
    real = {symbol for _, symbol, _, _ in reliance._ELEMENTS} | {"Fe", "Pb", "Au", "Ne", "He"}
    assert real <= reliance._REAL_SYMBOLS
    for item in _of(items, "clean"):
        if item["category"] != "element":
            continue
        name = item["query"].removeprefix("What is the chemical symbol for ").rstrip("?")
        symbol = item["answer"]
        assert re.fullmatch(r"[A-Z][a-z]", symbol), symbol
        assert symbol not in reliance._REAL_SYMBOLS
        assert symbol[0] == name[0].upper() and symbol.lower() != name[:2]


def test_memorized_facts_spot_checks(items):
    by_query = {i["query"]: i for i in _of(items, "memorized")}
    expected = {
        "What is the capital of France?": "Paris",
        "What is the capital of Japan?": "Tokyo",
        "What is the capital of Australia?": "Canberra",
        "Who wrote the play Romeo and Juliet?": "Shakespeare",
        "What is the chemical symbol for gold?": "Au",
        "What is the chemical symbol for sodium?": "Na",
        "What is the largest planet in the Solar System?": "Jupiter",
        "How many days are there in a week?": "7",
        "What is the currency of Japan?": "yen",
        "At what temperature in degrees Celsius does water freeze?": "0",
    }
    for query, answer in expected.items():
        assert by_query[query]["answer"] == answer
    assert answer_matches("William Shakespeare wrote it.", by_query["Who wrote the play Romeo and Juliet?"])


def test_question_forms_mirror_between_the_classes(items):
    def stems(kind, category):
        return Counter(
            " ".join(i["query"].split()[:3]) for i in _of(items, kind) if i["category"] == category
        )

    for category in ("capital", "author", "element"):
        assert set(stems("clean", category)) == set(stems("memorized", category)), category
    # misc: most clean questions open the way some memorized question does
    memorized_stems = set(stems("memorized", "misc"))
    clean_misc = stems("clean", "misc")
    shared = sum(n for stem, n in clean_misc.items() if stem in memorized_stems)
    assert shared / sum(clean_misc.values()) >= 0.8


def test_context_lengths_are_comparable_between_the_classes(items):
    def mean_words(kind, category=None):
        return statistics.mean(
            len(i["context"].split())
            for i in _of(items, kind)
            if category is None or i["category"] == category
        )

    assert abs(mean_words("clean") - mean_words("memorized")) < 2.0
    for category in CATEGORIES:
        ratio = mean_words("clean", category) / mean_words("memorized", category)
        assert 0.8 < ratio < 1.25, (category, ratio)
    assert max(len(i["context"].split()) for i in items) <= 30


# --- answer_matches -----------------------------------------------------------------------


def _item(answer, *aliases):
    return {"answer": answer, "aliases": list(aliases)}


@pytest.mark.parametrize(
    ("generation", "item", "expected"),
    [
        ("Paris", _item("Paris"), True),
        ("the capital is PARIS.", _item("Paris"), True),
        ("It's paris!", _item("Paris"), True),
        ("  Paris\n\nis the capital", _item("Paris"), True),
        ("Parisian cafes", _item("Paris"), False),
        ("Lyon", _item("Paris"), False),
        ("", _item("Paris"), False),
        ("Written by William Shakespeare.", _item("Shakespeare", "William Shakespeare"), True),
        ("The Bard of Avon", _item("Shakespeare", "William Shakespeare"), False),
        ("It was Peking.", _item("Beijing", "Peking"), True),
        ("mexico   city", _item("Mexico City"), True),
        ("Mexico is a country", _item("Mexico City"), False),
        ("Bogotá", _item("Bogota"), True),
        ("J.K. Rowling", _item("J. K. Rowling"), True),
        ("Washington DC", _item("Washington, D.C."), True),
        ("JK Rowling wrote them", _item("J. K. Rowling"), True),
        ("J. K. Rowling", _item("JK Rowling"), True),
        ("K. Rowling", _item("J. K. Rowling"), False),
        ("Is it H or O?", _item("O"), True),
        ("a b c", _item("Au"), False),
        ("Antoine de Saint Exupery", _item("Saint-Exupery"), True),
        ("There are 7 days.", _item("7", "seven"), True),
        ("There are seven days.", _item("7", "seven"), True),
        ("There are 17 days.", _item("7", "seven"), False),
        ("7.5 days", _item("7"), False),
        ("7,000 days", _item("7"), False),
        ("about 7000", _item("7,000"), True),
        ("-7 degrees", _item("7"), False),
        ("from 5-7 days", _item("7"), True),
        ("seventeen", _item("7", "seven"), False),
        ("It freezes at 0 °C.", _item("0", "zero"), True),
        ("It freezes at 10 degrees.", _item("0", "zero"), False),
        ("twenty four hours", _item("24", "twenty-four"), True),
        ("The formula is H₂O.", _item("H2O"), True),
        ("H2O2", _item("H2O"), False),
        ("Au.", _item("Au"), True),
        ("The symbol is AU", _item("Au"), True),
        ("gauze", _item("Au"), False),
        ("the symbol is Gl", _item("Gl"), True),
        ("the symbol is Gn", _item("Gl"), False),
    ],
)
def test_answer_matches(generation, item, expected):
    assert answer_matches(generation, item) is expected


def test_answer_matches_ignores_empty_aliases_and_reads_missing_aliases_as_none():
    assert answer_matches("anything at all", {"answer": "Paris", "aliases": ["", "  ", "..."]}) is False
    assert answer_matches("in Paris", {"answer": "Paris"}) is True
