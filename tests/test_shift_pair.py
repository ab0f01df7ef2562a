"""The shift-controlled pair (bench/shift.py): one fictional corpus split by register and era."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from mnemoscope.bench.datasets import load_documents
from mnemoscope.bench.shift import PER_TOPIC, SHIFT_FILE, TOPICS, generate_shift, load_shift, shift_documents
from mnemoscope.bench.tables import DATA_DIR
from mnemoscope.data.records import read_records

_YEAR = re.compile(r"\b(1[89]\d\d|20\d\d)\b")


def test_deterministic_and_shipped() -> None:
    assert generate_shift(0) == generate_shift(0)
    assert generate_shift(0) == load_shift()  # the shipped file is seed 0
    assert [d.text for d in shift_documents(1)] != [d.text for d in shift_documents(0)]


def test_balanced_unique_and_topic_balanced() -> None:
    docs = shift_documents()
    assert len(docs) == 2 * PER_TOPIC * len(TOPICS) == 300
    assert len({d.id for d in docs}) == len(docs)
    assert Counter(d.label for d in docs) == {1: 150, 0: 150}
    per = Counter((d.meta["topic"], d.label) for d in docs)
    assert per == {(t, lab): PER_TOPIC for t in TOPICS for lab in (0, 1)}  # same topics on both sides
    for d in docs:
        assert d.meta["register"] == ("archaic" if d.label == 1 else "modern")
        assert d.text.strip() and d.id.startswith(f"shift-{d.meta['topic']}-")
        assert "archaic" not in d.id and "modern" not in d.id  # the id does not name the class


def test_eras_do_not_overlap() -> None:
    for d in shift_documents():
        years = [int(y) for y in _YEAR.findall(d.text)]
        assert years, d.id
        lo, hi = (1880, 1910) if d.label == 1 else (2031, 2060)
        assert all(lo <= y <= hi for y in years), (d.id, years)
        assert d.meta["year"] == years[0]


def test_same_length_scale_on_both_sides() -> None:
    docs = shift_documents()
    words = {lab: np.array([len(d.text.split()) for d in docs if d.label == lab]) for lab in (0, 1)}
    for w in words.values():
        assert w.min() >= 45 and w.max() <= 110  # about 70-120 tokens of the default model
    assert abs(words[1].mean() - words[0].mean()) < 0.15 * words[0].mean()


def test_readable_by_crm_and_bench() -> None:
    recs, errors = read_records(DATA_DIR / SHIFT_FILE, default_query=True)
    assert not errors and len(recs) == 300
    assert all(r.query_defaulted for r in recs)  # the paper's continuation probe, as on the siblings
    docs, errs = load_documents(DATA_DIR / SHIFT_FILE)
    assert not errs
    assert [d.id for d in docs] == [d.id for d in shift_documents()]
    assert [d.text for d in docs] == [d.text for d in shift_documents()]
    assert [d.label for d in docs] == [d.label for d in shift_documents()]


def test_text_alone_separates_the_pair() -> None:
    """A detector that reads the text "succeeds" without any memory, and the diagnostic says so."""
    from mnemoscope.pipelines.blind import blind_baselines

    docs = shift_documents()
    rep = blind_baselines(
        [d.id for d in docs],
        [d.text for d in docs],
        [d.label for d in docs],
        methods=("blind_tfidf", "blind_date"),
        seed=42,
        n_splits=5,
        n_resamples=200,
        embed=False,
    )
    by = {e["method"]: e for e in rep.entries}
    assert by["blind_tfidf"]["roc_auc"] > 0.95
    assert by["blind_tfidf"]["roc_auc_ci"][0] > 0.9
    assert by["blind_date"]["roc_auc"] > 0.95
    assert rep.diagnostic["shift_warning"] is True
