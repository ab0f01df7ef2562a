"""mnemoscope.stats: metrics against sklearn, resampling against scipy, leakage-free CV."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from scipy.stats import bootstrap, false_discovery_control
from sklearn.decomposition import PCA
from sklearn.feature_selection import SelectKBest, f_classif
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.metrics import roc_curve as sk_roc_curve
from sklearn.pipeline import make_pipeline
from sklearn.svm import LinearSVC

from mnemoscope.errors import InputError
from mnemoscope.stats import (
    CVResult,
    Estimate,
    auc_ci,
    bh_adjust,
    bh_reject,
    bootstrap_ci,
    calibration_split,
    cross_val_scores,
    fpr_at_tpr,
    paper_protocol_cv,
    permutation_pvalues,
    permutation_test_auc,
    precision_at_k,
    roc_auc,
    roc_curve,
    summarize,
    threshold_metrics,
    tpr_at_fpr,
    undefined_reason,
)
from mnemoscope.stats.metrics import _resampled_aucs


def _tied_data(seed: int, n: int = 200, shift: float = 0.7):
    """Scores rounded to one decimal, so many ties within and across classes."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    s = np.round(rng.normal(size=n) + shift * y, 1)
    return s, y


# --------------------------------------------------------------------------- roc_auc


@pytest.mark.parametrize("seed", range(6))
def test_roc_auc_matches_sklearn_with_ties(seed):
    s, y = _tied_data(seed, n=50 + 40 * seed)
    assert len(np.unique(s)) < s.size  # there really are ties
    assert roc_auc(s, y) == pytest.approx(roc_auc_score(y, s), abs=1e-12)


def test_roc_auc_all_tied_is_half_and_perfect_is_one():
    assert roc_auc([0.3] * 6, [0, 1, 0, 1, 1, 0]) == 0.5
    assert roc_auc([1, 2, 3, 4], [0, 0, 1, 1]) == 1.0
    assert roc_auc([4, 3, 2, 1], [0, 0, 1, 1]) == 0.0


def test_roc_auc_accepts_bool_and_float_labels():
    s = [0.1, 0.4, 0.35, 0.8]
    assert roc_auc(s, [False, False, True, True]) == roc_auc(s, [0.0, 0.0, 1.0, 1.0]) == 0.75


@pytest.mark.parametrize("labels", [[1, 1, 1, 1], [0, 0, 0, 0]])
def test_single_class_is_not_measured_or_strict_error(labels):
    s = [0.1, 0.2, 0.3, 0.4]
    n_pos = sum(labels)
    reason = f"only one class present (n_pos={n_pos}, n_neg={4 - n_pos})"
    assert roc_auc(s, labels) is None
    assert undefined_reason(labels) == reason
    e = auc_ci(s, labels)
    assert e.estimate is None and e.ci_low is None and e.ci_high is None
    assert e.reason == reason and not e.measured and e.n_resamples == 0
    assert tpr_at_fpr(s, labels, 0.05) is None
    assert fpr_at_tpr(s, labels, 0.95) is None
    assert roc_curve(s, labels) is None
    for strict_call in (
        lambda: roc_auc(s, labels, strict=True),
        lambda: auc_ci(s, labels, strict=True),
        lambda: tpr_at_fpr(s, labels, 0.05, strict=True),
    ):
        with pytest.raises(InputError, match="only one class present"):
            strict_call()


@pytest.mark.parametrize(
    ("scores", "labels", "match"),
    [
        ([0.1, 0.2, 0.3], [0, 1], "differ in length"),
        ([0.1, float("nan"), 0.3], [0, 1, 0], "non-finite"),
        ([0.1, float("inf"), 0.3], [0, 1, 0], "non-finite"),
        ([0.1, 0.2, 0.3], [0, 1, 2], "must be 0 or 1"),
        ([0.1, 0.2, 0.3], [0, 0.5, 1], "must be 0 or 1"),
        ([0.1, 0.2], ["member", "nonmember"], "numeric"),
        ([], [], "empty"),
        ([[0.1, 0.2]], [[0, 1]], "1-D"),
    ],
)
def test_bad_input_raises_input_error(scores, labels, match):
    with pytest.raises(InputError, match=match):
        roc_auc(scores, labels)


# --------------------------------------------------------------------------- auc_ci


def test_vectorised_resampled_aucs_equal_sklearn_per_resample():
    s, y = _tied_data(3, n=80)
    pos, neg = s[y == 1], np.sort(s[y == 0])
    rng = np.random.default_rng(0)
    idx_p = rng.integers(0, pos.size, (25, pos.size))
    idx_n = rng.integers(0, neg.size, (25, neg.size))
    fast = _resampled_aucs(pos, neg, idx_p, idx_n)
    truth = np.ones(pos.size + neg.size)
    truth[pos.size :] = 0
    naive = [roc_auc_score(truth, np.r_[pos[idx_p[b]], neg[idx_n[b]]]) for b in range(25)]
    np.testing.assert_allclose(fast, naive, atol=1e-12)


def test_auc_ci_contains_estimate_and_is_deterministic():
    s, y = _tied_data(0, n=300)
    a = auc_ci(s, y, rng=7)
    b = auc_ci(s, y, rng=7)
    c = auc_ci(s, y, rng=8)
    assert a == b
    assert a.ci_low != c.ci_low or a.ci_high != c.ci_high
    assert a.ci_low < a.estimate < a.ci_high
    assert a.estimate == pytest.approx(roc_auc_score(y, s))
    assert (a.n, a.n_pos + a.n_neg, a.n_resamples, a.confidence) == (300, 300, 1000, 0.95)
    assert a.method == "stratified-bootstrap-percentile"
    d = a.to_dict()
    assert json.loads(json.dumps(d)) == d and d["reason"] is None
    assert auc_ci(s, y, rng=np.random.default_rng(3)) == auc_ci(s, y, rng=np.random.default_rng(3))


def test_auc_ci_narrows_with_n_and_with_lower_confidence():
    widths = []
    for n in (100, 400, 1600):
        s, y = _tied_data(1, n=n)
        e = auc_ci(s, y, n_resamples=500)
        widths.append(e.ci_high - e.ci_low)
    assert widths[0] > widths[1] > widths[2]
    assert widths[0] / widths[2] > 2.5  # roughly 1/sqrt(n): expect ~4
    s, y = _tied_data(1, n=400)
    e90 = auc_ci(s, y, confidence=0.90, n_resamples=500)
    e99 = auc_ci(s, y, confidence=0.99, n_resamples=500)
    assert e90.ci_high - e90.ci_low < e99.ci_high - e99.ci_low


def test_auc_ci_close_to_scipy_stratified_bootstrap():
    s, y = _tied_data(2, n=200)
    pos, neg = s[y == 1], s[y == 0]

    def stat(p, q, axis=-1):
        return (np.mean(p[..., :, None] > q[..., None, :], axis=(-2, -1))) + 0.5 * np.mean(
            p[..., :, None] == q[..., None, :], axis=(-2, -1)
        )

    ref = bootstrap(
        (pos, neg), stat, n_resamples=2000, method="percentile", random_state=0, vectorized=True, batch=100
    )
    ours = auc_ci(s, y, n_resamples=2000)
    assert ours.ci_low == pytest.approx(ref.confidence_interval.low, abs=0.02)
    assert ours.ci_high == pytest.approx(ref.confidence_interval.high, abs=0.02)


def test_auc_ci_is_fast():
    s, y = _tied_data(4, n=1000)
    auc_ci(s, y, n_resamples=10)  # warm-up
    t0 = time.perf_counter()
    e = auc_ci(s, y, n_resamples=1000)
    assert time.perf_counter() - t0 < 1.0
    assert e.n_resamples == 1000


def test_auc_ci_validates_settings():
    s, y = _tied_data(0, n=20)
    with pytest.raises(InputError, match="confidence"):
        auc_ci(s, y, confidence=1.0)
    with pytest.raises(InputError, match="n_resamples"):
        auc_ci(s, y, n_resamples=0)


# --------------------------------------------------------------------------- operating points


def test_roc_curve_matches_sklearn():
    s, y = _tied_data(5, n=150)
    fpr, tpr, thr = roc_curve(s, y)
    sk_fpr, sk_tpr, sk_thr = sk_roc_curve(y, s, drop_intermediate=False)
    np.testing.assert_allclose(fpr, sk_fpr)
    np.testing.assert_allclose(tpr, sk_tpr)
    np.testing.assert_array_equal(thr[1:], sk_thr[1:])
    assert np.isinf(thr[0])


def test_tpr_at_fpr_and_fpr_at_tpr_hand_example():
    # descending: 0.9(1) 0.8(0) 0.7(1) 0.6(1) 0.5(0) 0.4(0) 0.3(1) 0.2(0)
    s = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2]
    y = [1, 0, 1, 1, 0, 0, 1, 0]
    # ROC points (fpr, tpr): (0,0) (0,.25) (.25,.25) (.25,.5) (.25,.75) (.5,.75) (.75,.75) (.75,1) (1,1)
    assert tpr_at_fpr(s, y, 0.0) == 0.25
    assert tpr_at_fpr(s, y, 0.01) == 0.25
    assert tpr_at_fpr(s, y, 0.25) == 0.75
    assert tpr_at_fpr(s, y, 0.74) == 0.75
    assert tpr_at_fpr(s, y, 0.75) == 1.0
    assert fpr_at_tpr(s, y, 0.25) == 0.0
    assert fpr_at_tpr(s, y, 0.5) == 0.25
    assert fpr_at_tpr(s, y, 0.95) == 0.75
    assert fpr_at_tpr(s, y, 0.0) == 0.0
    with pytest.raises(InputError, match="fpr"):
        tpr_at_fpr(s, y, 1.5)


@pytest.mark.parametrize("seed", range(4))
def test_operating_points_match_sklearn_roc_curve(seed):
    s, y = _tied_data(seed, n=300)
    fpr, tpr, _ = sk_roc_curve(y, s)
    for target in (0.01, 0.05, 0.1, 0.3):
        assert tpr_at_fpr(s, y, target) == pytest.approx(tpr[fpr <= target].max())
    for target in (0.5, 0.9, 0.95):
        assert fpr_at_tpr(s, y, target) == pytest.approx(fpr[tpr >= target].min())


def test_precision_at_k_hand_example_and_ties():
    s = [0.2, 0.9, 0.5, 0.5, 0.1]
    y = [1, 1, 0, 1, 0]
    assert precision_at_k(s, y, 1) == 1.0
    # stable sort on descending score: the tied 0.5 at index 2 (label 0) comes before index 3
    assert precision_at_k(s, y, 2) == 0.5
    assert precision_at_k(s, y, 3) == pytest.approx(2 / 3)
    assert precision_at_k(s, y, 5) == 0.6
    assert precision_at_k([0.1, 0.2], [1, 1], 1) == 1.0  # defined for a single class
    for bad_k in (0, 6, 1.5):
        with pytest.raises(InputError, match="k must be"):
            precision_at_k(s, y, bad_k)


def test_threshold_metrics_hand_example():
    s = [0.9, 0.6, 0.5, 0.5, 0.3, 0.1]
    y = [1, 0, 1, 0, 1, 0]
    m = threshold_metrics(s, y, 0.5)  # >= 0.5 predicts 1: indices 0..3
    assert (m.tp, m.fp, m.tn, m.fn) == (2, 2, 1, 1)
    assert m.accuracy == pytest.approx(3 / 6)
    assert m.precision == pytest.approx(0.5)
    assert m.recall == pytest.approx(2 / 3)
    assert m.f1 == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
    none = threshold_metrics(s, y, 0.95)  # nothing predicted 1
    assert (none.tp, none.fp, none.precision, none.recall, none.f1) == (0, 0, None, 0.0, 0.0)
    assert json.loads(json.dumps(m.to_dict()))["tp"] == 2


# --------------------------------------------------------------------------- summarize


def test_summarize_contract():
    s, y = _tied_data(6, n=120)
    d = summarize(s, y, n_resamples=200)
    assert set(d) == {
        "roc_auc",
        "roc_auc_ci",
        "tpr_at_1pct_fpr",
        "tpr_at_5pct_fpr",
        "fpr_at_95_tpr",
        "precision_at_10",
        "n",
        "n_pos",
        "n_neg",
        "reason",
    }
    assert json.loads(json.dumps(d)) == d
    assert d["roc_auc"] == pytest.approx(roc_auc_score(y, s))
    assert d["roc_auc_ci"][0] <= d["roc_auc"] <= d["roc_auc_ci"][1]
    assert d["tpr_at_1pct_fpr"] <= d["tpr_at_5pct_fpr"]
    assert d["fpr_at_95_tpr"] == fpr_at_tpr(s, y, 0.95)
    assert d["precision_at_10"] == precision_at_k(s, y, 10)
    assert (d["n"], d["n_pos"] + d["n_neg"], d["reason"]) == (120, 120, None)
    assert summarize(s, y, n_resamples=200) == d  # deterministic under the default rng


def test_summarize_single_class():
    d = summarize(np.arange(12.0), np.ones(12, dtype=int), n_resamples=50)
    assert d["reason"] == "only one class present (n_pos=12, n_neg=0)"
    for key in ("roc_auc", "roc_auc_ci", "tpr_at_1pct_fpr", "tpr_at_5pct_fpr", "fpr_at_95_tpr"):
        assert d[key] is None
    assert d["precision_at_10"] == 1.0
    assert (d["n"], d["n_pos"], d["n_neg"]) == (12, 12, 0)
    assert json.loads(json.dumps(d)) == d


# --------------------------------------------------------------------------- permutation tests


def test_permutation_test_perfect_separator():
    s = np.arange(40.0)
    y = (s >= 20).astype(int)
    r = permutation_test_auc(s, y, n_permutations=999, rng=0)
    assert r.observed == 1.0
    assert r.pvalue == pytest.approx(1 / 1000)  # the smallest attainable
    assert r.null.shape == (999,) and not r.null.flags.writeable
    assert abs(r.null.mean() - 0.5) < 0.02
    r2 = permutation_test_auc(s, y, n_permutations=999, rng=0, alternative="two-sided")
    assert r2.pvalue == pytest.approx(1 / 1000)
    flipped = permutation_test_auc(-s, y, n_permutations=999, rng=0)
    assert flipped.observed == 0.0 and flipped.pvalue == 1.0
    assert permutation_test_auc(-s, y, n_permutations=999, rng=0, alternative="two-sided").pvalue < 0.01


def test_permutation_null_matches_sklearn_and_pvalue_formula():
    s, y = _tied_data(8, n=60, shift=0.3)
    r = permutation_test_auc(s, y, n_permutations=300, rng=1)
    assert r.observed == pytest.approx(roc_auc_score(y, s))
    assert r.pvalue == pytest.approx((1 + np.sum(r.null >= r.observed)) / 301)
    assert r.to_dict()["pvalue"] == r.pvalue
    assert r.null.min() >= 0.0 and r.null.max() <= 1.0
    # every null value is the AUC of some relabelling with the same class counts
    assert np.all(np.isin(np.round(r.null * 2 * r.n_pos * r.n_neg), np.arange(2 * r.n_pos * r.n_neg + 1)))


def test_permutation_pvalues_roughly_uniform_for_random_scores():
    rng = np.random.default_rng(0)
    pvals = []
    for _ in range(60):
        s = rng.normal(size=40)
        y = rng.permutation(np.repeat([0, 1], 20))
        pvals.append(permutation_test_auc(s, y, n_permutations=199, rng=rng).pvalue)
    p = np.array(pvals)
    assert 0.35 < p.mean() < 0.65  # uniform has mean 0.5
    assert 0.01 < np.mean(p < 0.1) < 0.25  # about 10% below 0.1
    assert p.min() >= 1 / 200


def test_permutation_test_close_to_scipy():
    from scipy.stats import permutation_test

    s, y = _tied_data(9, n=50, shift=0.4)
    pos, neg = s[y == 1], s[y == 0]

    def stat(p, q, axis=-1):
        return np.mean(p[..., :, None] > q[..., None, :], axis=(-2, -1)) + 0.5 * np.mean(
            p[..., :, None] == q[..., None, :], axis=(-2, -1)
        )

    ref = permutation_test(
        (pos, neg), stat, n_resamples=3000, alternative="greater", vectorized=True, random_state=0
    )
    ours = permutation_test_auc(s, y, n_permutations=3000, rng=0)
    assert ours.observed == pytest.approx(ref.statistic)
    assert ours.pvalue == pytest.approx(ref.pvalue, abs=0.03)


def test_permutation_pvalues_generic():
    null = np.array([[0.1, 5.0], [0.2, 6.0], [0.3, 7.0], [0.4, 8.0]])
    p = permutation_pvalues([0.25, 100.0], null)
    np.testing.assert_allclose(p, [(1 + 2) / 5, 1 / 5])
    np.testing.assert_allclose(permutation_pvalues([0.25, 100.0], null, alternative="less"), [3 / 5, 1.0])
    assert permutation_pvalues(0.2, [0.1, 0.2, 0.3]).tolist() == [0.75]  # a tie counts
    with pytest.raises(InputError, match="shape"):
        permutation_pvalues([0.1, 0.2], np.zeros((5, 3)))


def test_permutation_test_bad_input():
    with pytest.raises(InputError, match="both classes"):
        permutation_test_auc([0.1, 0.2, 0.3], [1, 1, 1])
    with pytest.raises(InputError, match="alternative"):
        permutation_test_auc([0.1, 0.2], [0, 1], alternative="less")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- BH


def test_bh_hand_example_and_scipy():
    p = [0.01, 0.04, 0.03, 0.20]
    # sorted 0.01, 0.03, 0.04, 0.20 -> m p / rank = 0.04, 0.06, 0.0533, 0.20 -> running min from the top
    np.testing.assert_allclose(bh_adjust(p), [0.04, 0.16 / 3, 0.16 / 3, 0.20])
    assert bh_reject(p, alpha=0.05).tolist() == [True, False, False, False]
    assert bh_reject(p, alpha=0.06).tolist() == [True, True, True, False]
    rng = np.random.default_rng(0)
    many = np.r_[rng.uniform(size=80), rng.uniform(0, 0.002, size=20)]
    q = bh_adjust(many)
    np.testing.assert_allclose(q, false_discovery_control(many, method="bh"))
    assert np.all(q >= many) and np.all(q <= 1)
    assert bh_reject(many, 0.05).sum() >= 20


def test_bh_validation():
    assert bh_adjust([]).size == 0
    for bad, match in (([0.1, np.nan], "NaN"), ([0.1, 1.2], r"\[0, 1\]"), ([-0.1], r"\[0, 1\]")):
        with pytest.raises(InputError, match=match):
            bh_adjust(bad)
    with pytest.raises(InputError, match="alpha"):
        bh_reject([0.1], alpha=0.0)


# --------------------------------------------------------------------------- bootstrap_ci


def test_bootstrap_ci_mean_against_scipy():
    x = np.random.default_rng(0).exponential(size=200)
    e = bootstrap_ci(x, n_resamples=2000, rng=0)
    ref = bootstrap((x,), np.mean, n_resamples=2000, method="percentile", random_state=0)
    assert e.estimate == pytest.approx(x.mean())
    assert e.ci_low == pytest.approx(ref.confidence_interval.low, abs=0.03)
    assert e.ci_high == pytest.approx(ref.confidence_interval.high, abs=0.03)
    assert e.ci_low < e.estimate < e.ci_high
    assert bootstrap_ci(x, rng=5) == bootstrap_ci(x, rng=5)
    assert (e.method, e.n, e.n_pos) == ("bootstrap-percentile", 200, None)


def test_bootstrap_ci_rows_and_custom_statistic():
    x = np.random.default_rng(1).normal(size=(100, 2))
    e = bootstrap_ci(x, lambda a: np.corrcoef(a[:, 0], a[:, 1])[0, 1], n_resamples=300)
    assert -1 <= e.ci_low <= e.estimate <= e.ci_high <= 1
    with pytest.raises(InputError, match="one finite number"):
        bootstrap_ci(x, lambda a: a.mean(axis=0), n_resamples=10)
    with pytest.raises(InputError, match="NaN"):
        bootstrap_ci([1.0, np.nan])


# --------------------------------------------------------------------------- cross-validation


def _noise(seed: int, n: int = 60, d: int = 500):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)), np.repeat([0, 1], n // 2)


def test_cv_leakage_feature_selection_inside_vs_outside_folds():
    def select_on_calibration(Xc, yc):
        return SelectKBest(f_classif, k=10).fit(Xc, yc).transform

    honest, leaky = [], []
    for seed in range(3):
        X, y = _noise(seed)
        pipe = make_pipeline(SelectKBest(f_classif, k=10), LogisticRegression())
        r = cross_val_scores(pipe, X, y, n_resamples=100)
        assert r.protocol == "leakage-free" and r.n_calibration == 0
        honest.append(r.auc.estimate)
        # selection fitted on ALL samples (the calibration set is everything) leaks the labels
        leak = paper_protocol_cv(
            LogisticRegression, X, y, np.arange(y.size), select_on_calibration, n_resamples=100
        )
        leaky.append(leak.auc.estimate)
    assert np.mean(honest) < 0.7
    assert min(leaky) > 0.8
    assert np.mean(leaky) - np.mean(honest) > 0.25


def test_cross_val_scores_result_and_determinism():
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], [30, 20])
    X = rng.normal(size=(50, 4)) + 1.5 * y[:, None]
    a = cross_val_scores(LogisticRegression(), X, y, n_splits=5, seed=3, n_resamples=200)
    b = cross_val_scores(LogisticRegression(), X, y, n_splits=5, seed=3, n_resamples=200)
    assert isinstance(a, CVResult) and isinstance(a.auc, Estimate)
    np.testing.assert_array_equal(a.oof_scores, b.oof_scores)
    np.testing.assert_array_equal(a.folds, b.folds)
    assert a.fold_aucs == b.fold_aucs and a.auc == b.auc
    assert np.isfinite(a.oof_scores).all() and ((a.oof_scores >= 0) & (a.oof_scores <= 1)).all()
    assert sorted(np.bincount(a.folds).tolist()) == [10] * 5
    for k in range(5):  # stratified: 6 negatives and 4 positives per fold
        assert np.bincount(y[a.folds == k]).tolist() == [6, 4]
    assert len(a.fold_aucs) == 5 and all(f is not None and f > 0.7 for f in a.fold_aucs)
    assert a.auc.estimate == pytest.approx(roc_auc_score(y, a.oof_scores))
    assert a.auc.ci_low <= a.auc.estimate <= a.auc.ci_high
    c = cross_val_scores(LogisticRegression(), X, y, n_splits=5, seed=4, n_resamples=200)
    assert not np.array_equal(a.folds, c.folds)
    d = a.to_dict(include_scores=True)
    assert json.loads(json.dumps(d)) == d and d["protocol"] == "leakage-free"


def test_cross_val_scores_decision_function_and_groups():
    rng = np.random.default_rng(1)
    y = np.tile([0, 1], 30)
    X = rng.normal(size=(60, 3)) + y[:, None]
    groups = np.arange(60) // 2  # pairs (one of each class) stay together
    r = cross_val_scores(LinearSVC(), X, y, n_splits=3, groups=groups, n_resamples=100)
    assert r.auc.estimate > 0.7
    for g in np.unique(groups):
        assert np.unique(r.folds[groups == g]).size == 1
    with pytest.raises(InputError, match="distinct groups"):
        cross_val_scores(LinearSVC(), X, y, n_splits=3, groups=np.arange(60) % 2)


def test_cross_val_scores_is_deterministic_for_unseeded_random_estimators():
    from sklearn.ensemble import RandomForestClassifier

    rng = np.random.default_rng(2)
    y = np.repeat([0, 1], 20)
    X = rng.normal(size=(40, 3)) + y[:, None]
    est = RandomForestClassifier(n_estimators=5)  # random_state=None
    a = cross_val_scores(est, X, y, n_resamples=50)
    b = cross_val_scores(est, X, y, n_resamples=50)
    np.testing.assert_array_equal(a.oof_scores, b.oof_scores)
    assert est.random_state is None  # the caller's estimator is untouched


def test_cv_single_class_and_tiny_minority():
    X = np.zeros((20, 2))
    with pytest.raises(InputError, match=r"both classes.*n_pos=0, n_neg=20"):
        cross_val_scores(LogisticRegression(), X, np.zeros(20, dtype=int))
    y = np.r_[np.zeros(17, dtype=int), np.ones(3, dtype=int)]
    with pytest.raises(InputError, match=r"n_splits=5 \(n_pos=3, n_neg=17\)"):
        cross_val_scores(LogisticRegression(), X, y, n_splits=5)
    with pytest.raises(InputError, match=r"n_pos=3"):
        paper_protocol_cv(LogisticRegression, X, y, [0, 1], lambda Xc, yc: lambda Z: Z)
    with pytest.raises(InputError, match="differ in length"):
        cross_val_scores(LogisticRegression(), X, y[:-1])
    with pytest.raises(InputError, match="n_splits"):
        cross_val_scores(LogisticRegression(), X, y, n_splits=1)
    r = cross_val_scores(LogisticRegression(), np.random.default_rng(0).normal(size=(20, 2)), y, n_splits=3)
    assert r.oof_scores.shape == (20,)


def test_paper_protocol_records_calibration():
    rng = np.random.default_rng(3)
    y = np.repeat([0, 1], [40, 20])
    X = rng.normal(size=(60, 8)) + y[:, None]
    cal = calibration_split(y, n_cal=15, seed=0)
    seen = {}

    def fit_pca(Xc, yc):
        seen["n"] = len(Xc)
        return PCA(n_components=3, random_state=0).fit(Xc).transform

    r = paper_protocol_cv(LogisticRegression, X, y, cal, fit_pca, n_resamples=100)
    assert seen["n"] == 15
    assert (r.protocol, r.n_calibration) == ("paper", 15)
    np.testing.assert_array_equal(r.calibration_idx, cal)
    assert r.oof_scores.shape == (60,) and np.isfinite(r.oof_scores).all()  # calibration samples scored too
    assert r.auc.estimate > 0.7
    r2 = paper_protocol_cv(LogisticRegression(), X, y, cal, fit_pca, n_resamples=100)  # instance also works
    np.testing.assert_array_equal(r.oof_scores, r2.oof_scores)
    assert r.to_dict()["n_calibration"] == 15
    with pytest.raises(InputError, match="out of range"):
        paper_protocol_cv(LogisticRegression, X, y, [0, 60], fit_pca)
    with pytest.raises(InputError, match="duplicates"):
        paper_protocol_cv(LogisticRegression, X, y, [1, 1], fit_pca)


def test_calibration_split_stratified_and_deterministic():
    y = np.repeat([0, 1], [300, 100])
    cal = calibration_split(y, n_cal=100, seed=42)
    assert cal.size == 100 and np.unique(cal).size == 100
    assert np.all(np.diff(cal) > 0)
    assert y[cal].sum() == 25  # 100 * 100/400
    np.testing.assert_array_equal(cal, calibration_split(y, n_cal=100, seed=42))
    assert not np.array_equal(cal, calibration_split(y, n_cal=100, seed=1))
    rare = np.r_[np.zeros(99, dtype=int), 1]
    assert rare[calibration_split(rare, n_cal=5, seed=0)].sum() == 1  # the minority is represented
    with pytest.raises(InputError, match="n_cal"):
        calibration_split(y, n_cal=401)
