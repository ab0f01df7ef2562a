"""Blind baselines (methods that never see the model) and the one shift rule."""

from __future__ import annotations

import numpy as np
import pytest

from mnemoscope.detectors import METHODS
from mnemoscope.detectors.blind import BLIND_METHODS, SHIFT_THRESHOLD, shift_diagnostic, year_features
from mnemoscope.pipelines.blind import blind_baselines

TOPICS = ["river", "harbour", "orchard", "library", "mill", "bridge", "market", "tower"]


def _shifted(n: int = 40, seed: int = 0) -> tuple[list[str], np.ndarray]:
    """Same topics on both sides; members in an archaic register with 19th-century years,
    non-members in a modern register with 2030s years."""
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        if i % 2:
            year = int(rng.integers(1880, 1910))
            texts.append(
                f"In the year {year} the {topic} was whereupon restored, as the elders did thereby decree."
            )
        else:
            year = int(rng.integers(2031, 2060))
            texts.append(f"In {year} the {topic} got upgraded, and the city council posted an update online.")
        labels.append(i % 2)
    return texts, np.array(labels)


def _unshifted(n: int = 60, seed: int = 0) -> tuple[list[str], np.ndarray]:
    """Labels independent of the text."""
    rng = np.random.default_rng(seed)
    texts = [
        f"The {TOPICS[int(rng.integers(len(TOPICS)))]} near the {TOPICS[int(rng.integers(len(TOPICS)))]} "
        f"opened in {int(rng.integers(1900, 2050))}."
        for _ in range(n)
    ]
    labels = rng.permutation(np.repeat([0, 1], n // 2))
    return texts, labels


def test_registered_and_blind() -> None:
    for name in BLIND_METHODS:
        m = METHODS.build(name)
        assert m.supervised and getattr(m, "blind", False)
        assert not ({"target", "reference", "lowercase", "pairs"} & m.requires)  # never a model trace


def test_year_features() -> None:
    f = year_features(
        ["Founded in 1998, closed in 2021.", "No dates.", "Price 12000 and 3.1999 are not years."]
    )
    assert f[0, :4].tolist() == [2.0, 1998.0, 2021.0, 2009.5]
    assert f[1, 0] == 0 and (f[1, 1:] == -1).all()
    assert f[2, 0] == 0  # digits inside larger numbers are not years
    # share of years >= 2000 is 0.5 for the first text
    assert f[0, 4 + 10] == 0.5


def test_shift_fires_on_shifted_text_and_not_on_label_noise() -> None:
    texts, y = _shifted()
    rep = blind_baselines([str(i) for i in range(len(y))], texts, y, embed=False, n_resamples=200)
    by = {e["method"]: e for e in rep.entries}
    assert by["blind_tfidf"]["roc_auc"] > 0.95 and by["blind_date"]["roc_auc"] > 0.95
    assert by["blind_embedding"]["status"] == "not measured"
    assert rep.diagnostic["shift_warning"] is True
    assert "predictable from the text alone" in rep.diagnostic["shift_reason"]
    assert set(rep.scores) == {"blind_tfidf", "blind_date"}

    texts, y = _unshifted()
    rep = blind_baselines([str(i) for i in range(len(y))], texts, y, embed=False, n_resamples=200)
    assert rep.diagnostic["shift_warning"] is False and rep.diagnostic["shift_measured"] is True
    for e in rep.entries:
        if e.get("roc_auc") is not None:
            assert e["roc_auc_ci"][0] <= SHIFT_THRESHOLD


def test_blind_embedding_with_the_real_offline_encoder() -> None:
    texts, y = _shifted(n=30)
    rep = blind_baselines(
        [str(i) for i in range(len(y))], texts, y, methods=("blind_embedding",), n_resamples=100, n_splits=3
    )
    (e,) = rep.entries
    assert e["roc_auc"] is not None and e["roc_auc"] > 0.9, e


@pytest.mark.parametrize(
    ("texts", "labels", "needle"),
    [
        (["a b c"] * 10, [1] * 10, "both classes"),
        (["a b c", "d e f", "g h", "i j", "k l", "m n"], [0, 0, 0, 1, 1, 1], "fewer samples than n_splits"),
        (None, [0, 1] * 5, "no text"),
    ],
)
def test_not_measured_never_raises(texts: list[str] | None, labels: list[int], needle: str) -> None:
    rep = blind_baselines([str(i) for i in range(len(labels))], texts, labels, embed=False, n_resamples=50)
    assert all(e["status"] == "not measured" for e in rep.entries)
    assert needle in rep.entries[0]["reason"]
    assert rep.diagnostic["shift_warning"] is False and rep.diagnostic["shift_measured"] is False
    assert rep.diagnostic["shift_reason"].startswith("not measured")


def test_shift_diagnostic_rule() -> None:
    rows = [
        {"method": "loss", "roc_auc": 0.99, "roc_auc_ci": [0.98, 1.0]},  # not blind: ignored
        {"method": "blind_date", "roc_auc": 0.70, "roc_auc_ci": [0.58, 0.80]},
        {"method": "blind_tfidf", "roc_auc": 0.66, "roc_auc_ci": [0.61, 0.71]},
    ]
    d = shift_diagnostic(rows)
    # the best blind (highest AUC) decides: blind_date's CI reaches below 0.60
    assert d["best_blind"] == "blind_date" and d["shift_warning"] is False
    d = shift_diagnostic(rows[::2])
    assert d["best_blind"] == "blind_tfidf" and d["shift_warning"] is True
    assert d["best_blind_auc_ci"] == [0.61, 0.71]
    assert shift_diagnostic(rows[:1])["shift_measured"] is False


def test_unknown_blind_method_is_an_input_error() -> None:
    from mnemoscope.errors import InputError

    with pytest.raises(InputError, match="not blind baselines: loss"):
        blind_baselines(["a", "b"], ["x", "y"], [0, 1], methods=("loss",))
