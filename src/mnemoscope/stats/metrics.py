"""Detection metrics: ROC-AUC with a stratified bootstrap CI, operating points, summaries.

Conventions: label 1 is the condition a detector flags (member, memorized), and scores
are oriented so that a higher score means "more likely 1".

**Undefined metrics.** ROC-AUC, the ROC curve and the operating points derived from it
need both classes. With a single class they are *not measured*: the function returns
``None`` (and :class:`Estimate` carries ``estimate=None`` plus a ``reason`` such as
``"only one class present (n_pos=10, n_neg=0)"``; :func:`undefined_reason` gives the same
string). Pass ``strict=True`` to raise :class:`~mnemoscope.errors.InputError` instead.
Everything else that is wrong with the input (mismatched lengths, NaN/inf scores,
non-binary labels, empty input) always raises :class:`~mnemoscope.errors.InputError`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.stats import rankdata

from mnemoscope.errors import InputError
from mnemoscope.stats.checks import (
    check_confidence,
    check_labels,
    check_n_resamples,
    check_pair,
    check_rate,
    class_counts,
    single_class_reason,
)

__all__ = [
    "Estimate",
    "ThresholdMetrics",
    "auc_ci",
    "fpr_at_tpr",
    "precision_at_k",
    "roc_auc",
    "roc_curve",
    "summarize",
    "threshold_metrics",
    "tpr_at_fpr",
    "undefined_reason",
]

# Bootstrap work is done in chunks of at most this many matrix cells (memory ~ 8 bytes each).
_CHUNK_CELLS = 4_000_000
_TOL = 1e-12


@dataclass(frozen=True)
class Estimate:
    """A point estimate with a confidence interval.

    Attributes:
        estimate: the statistic on the full sample, or ``None`` when it is undefined.
        ci_low, ci_high: the interval bounds (``None`` when undefined).
        n_resamples: resamples actually drawn (0 when nothing was resampled).
        method: how the interval was computed, e.g. ``"stratified-bootstrap-percentile"``.
        confidence: nominal coverage of the interval, e.g. 0.95.
        n: sample size; n_pos, n_neg: class counts (``None`` for label-free statistics).
        reason: why the estimate is ``None`` (``None`` when it was measured).
    """

    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    n_resamples: int
    method: str
    confidence: float
    n: int
    n_pos: int | None = None
    n_neg: int | None = None
    reason: str | None = None

    @property
    def measured(self) -> bool:
        """Whether the statistic is defined (``estimate is not None``)."""
        return self.estimate is not None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (plain floats, ints, strings or ``None``)."""
        return asdict(self)


@dataclass(frozen=True)
class ThresholdMetrics:
    """Metrics of the decision rule ``predict 1 if score >= threshold``.

    A ratio whose denominator is zero is ``None``: precision when nothing is predicted 1,
    recall when there is no positive, F1 (= 2tp / (2tp + fp + fn)) when tp = fp = fn = 0.
    """

    threshold: float
    tp: int
    fp: int
    tn: int
    fn: int
    accuracy: float
    precision: float | None
    recall: float | None
    f1: float | None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return asdict(self)


# --------------------------------------------------------------------------- validation


def undefined_reason(labels: npt.ArrayLike) -> str | None:
    """Why ROC-AUC cannot be measured on ``labels`` (``None`` if it can).

    Example:
        >>> undefined_reason([1, 1, 1])
        'only one class present (n_pos=3, n_neg=0)'
        >>> undefined_reason([0, 1]) is None
        True
    """
    return single_class_reason(*class_counts(check_labels(labels)))


# --------------------------------------------------------------------------- ROC-AUC


def _auc_exact(s: np.ndarray, y: np.ndarray, n_pos: int, n_neg: int) -> float:
    # Mann-Whitney U from average ranks; 2 * rank is an integer, so the sum is exact.
    ranks2 = np.rint(2.0 * rankdata(s, method="average")).astype(np.int64)
    u2 = int(ranks2[y == 1].sum()) - n_pos * (n_pos + 1)
    return u2 / (2.0 * n_pos * n_neg)


def roc_auc(scores: npt.ArrayLike, labels: npt.ArrayLike, *, strict: bool = False) -> float | None:
    """Area under the ROC curve (ties count one half), as ``sklearn.metrics.roc_auc_score``.

    Args:
        scores: ``[n]`` finite scores, higher = more likely label 1.
        labels: ``[n]`` 0/1 labels.
        strict: raise :class:`InputError` instead of returning ``None`` for a single class.

    Returns:
        The AUC in [0, 1], or ``None`` when only one class is present
        (see :func:`undefined_reason` for the message).

    Example:
        >>> roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1])
        0.75
        >>> roc_auc([0.1, 0.2], [1, 1]) is None
        True
    """
    s, y = check_pair(scores, labels)
    n_pos, n_neg = class_counts(y)
    if single_class_reason(n_pos, n_neg, strict) is not None:
        return None
    return _auc_exact(s, y, n_pos, n_neg)


def _resampled_aucs(
    pos: np.ndarray, neg_sorted: np.ndarray, idx_p: np.ndarray, idx_n: np.ndarray
) -> np.ndarray:
    """AUC of each resample ``(pos[idx_p[b]], neg_sorted[idx_n[b]])``, all rows at once.

    For resample b, ``cum[b, j]`` counts the drawn negatives among the j smallest; a
    positive with ``left`` negatives strictly below it and ``right`` at or below it then
    beats ``cum[b, left]`` drawn negatives and ties ``cum[b, right] - cum[b, left]``.
    Everything is integer arithmetic until the final division.
    """
    b, n_neg = idx_n.shape
    n_pos = idx_p.shape[1]
    left = np.searchsorted(neg_sorted, pos, side="left")
    right = np.searchsorted(neg_sorted, pos, side="right")
    offsets = np.arange(b, dtype=np.int64)[:, None] * n_neg
    counts = np.bincount((idx_n + offsets).ravel(), minlength=b * n_neg).reshape(b, n_neg)
    cum = np.zeros((b, n_neg + 1), dtype=np.int64)
    np.cumsum(counts, axis=1, out=cum[:, 1:])
    wins2 = np.take_along_axis(cum, left[idx_p], axis=1) + np.take_along_axis(cum, right[idx_p], axis=1)
    return np.asarray(wins2.sum(axis=1) / (2.0 * n_pos * n_neg), dtype=np.float64)


def auc_ci(
    scores: npt.ArrayLike,
    labels: npt.ArrayLike,
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    rng: np.random.Generator | int | None = 0,
    strict: bool = False,
) -> Estimate:
    """ROC-AUC with a stratified-bootstrap percentile confidence interval.

    Each resample draws ``n_pos`` positives from the positives and ``n_neg`` negatives
    from the negatives, with replacement, so every resample has both classes and the
    original class balance. The AUC of every resample is computed at once from
    cumulative counts (O(n_resamples x n) time and memory, in chunks).

    Args:
        scores, labels: as in :func:`roc_auc`.
        n_resamples: bootstrap resamples.
        confidence: nominal coverage; the interval is the (1 - c)/2 and (1 + c)/2 quantiles.
        rng: a ``np.random.Generator`` or a seed.
        strict: raise :class:`InputError` for a single class instead of returning an
            :class:`Estimate` with ``estimate=None`` and a ``reason``.

    Example:
        >>> e = auc_ci([0.1, 0.4, 0.35, 0.8, 0.7, 0.2], [0, 0, 1, 1, 1, 0], n_resamples=200, rng=0)
        >>> round(e.estimate, 4), e.ci_low <= e.estimate <= e.ci_high
        (0.8889, True)
        >>> auc_ci([0.1, 0.2], [0, 0]).reason
        'only one class present (n_pos=0, n_neg=2)'
    """
    s, y = check_pair(scores, labels)
    confidence = check_confidence(confidence)
    n_resamples = check_n_resamples(n_resamples)
    n_pos, n_neg = class_counts(y)
    method = "stratified-bootstrap-percentile"
    reason = single_class_reason(n_pos, n_neg, strict)
    if reason is not None:
        return Estimate(None, None, None, 0, method, confidence, int(y.size), n_pos, n_neg, reason)
    gen = np.random.default_rng(rng)
    neg = np.sort(s[y == 0])
    pos = s[y == 1]
    chunk = max(1, _CHUNK_CELLS // (n_pos + n_neg + 1))
    out = np.empty(n_resamples, dtype=np.float64)
    for start in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - start)
        idx_n = gen.integers(0, n_neg, size=(b, n_neg))
        idx_p = gen.integers(0, n_pos, size=(b, n_pos))
        out[start : start + b] = _resampled_aucs(pos, neg, idx_p, idx_n)
    alpha = 1.0 - confidence
    low, high = np.quantile(out, [alpha / 2.0, 1.0 - alpha / 2.0])
    estimate = _auc_exact(s, y, n_pos, n_neg)
    return Estimate(
        estimate, float(low), float(high), n_resamples, method, confidence, int(y.size), n_pos, n_neg
    )


# --------------------------------------------------------------------------- operating points


def roc_curve(
    scores: npt.ArrayLike, labels: npt.ArrayLike, *, strict: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Every point of the ROC curve: ``(fpr, tpr, thresholds)``.

    Same as ``sklearn.metrics.roc_curve(labels, scores, drop_intermediate=False)``: one
    point per distinct score (rule ``score >= threshold``), descending thresholds, starting
    at (0, 0) with threshold ``+inf``. ``None`` for a single class (or InputError if strict).

    Example:
        >>> fpr, tpr, thr = roc_curve([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1])
        >>> fpr.tolist(), tpr.tolist()
        ([0.0, 0.0, 0.5, 0.5, 1.0], [0.0, 0.5, 0.5, 1.0, 1.0])
    """
    s, y = check_pair(scores, labels)
    n_pos, n_neg = class_counts(y)
    if single_class_reason(n_pos, n_neg, strict) is not None:
        return None
    order = np.argsort(-s, kind="stable")
    s_sorted, y_sorted = s[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(s_sorted)), y.size - 1]  # last index of each distinct score
    tps = np.cumsum(y_sorted)[last]
    return np.r_[0.0, (last + 1 - tps) / n_neg], np.r_[0.0, tps / n_pos], np.r_[np.inf, s_sorted[last]]


def tpr_at_fpr(
    scores: npt.ArrayLike, labels: npt.ArrayLike, fpr: float, *, strict: bool = False
) -> float | None:
    """The largest TPR over ROC points with FPR <= ``fpr`` (e.g. 0.01 or 0.05).

    Only thresholds actually achievable are used (no interpolation), so with 50 negatives
    ``fpr=0.01`` means "no false positive at all". ``None`` for a single class.

    Example:
        >>> tpr_at_fpr([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1], fpr=0.0)
        0.5
    """
    target = check_rate(fpr, "fpr")
    curve = roc_curve(scores, labels, strict=strict)
    return None if curve is None else float(curve[1][curve[0] <= target + _TOL].max())


def fpr_at_tpr(
    scores: npt.ArrayLike, labels: npt.ArrayLike, tpr: float = 0.95, *, strict: bool = False
) -> float | None:
    """The smallest FPR over ROC points with TPR >= ``tpr``. ``None`` for a single class.

    Example:
        >>> fpr_at_tpr([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1], tpr=1.0)
        0.5
    """
    target = check_rate(tpr, "tpr")
    curve = roc_curve(scores, labels, strict=strict)
    return None if curve is None else float(curve[0][curve[1] >= target - _TOL].min())


def precision_at_k(scores: npt.ArrayLike, labels: npt.ArrayLike, k: int) -> float:
    """Fraction of label-1 samples among the ``k`` highest scores.

    Ties: samples are ordered by a *stable* sort on descending score, so among equal
    scores the one that comes first in the input is ranked higher. Defined for a single
    class too (it is then 0 or 1). ``k`` must be in [1, n].

    Example:
        >>> precision_at_k([0.9, 0.8, 0.8, 0.1], [1, 0, 1, 1], k=2)
        0.5
    """
    s, y = check_pair(scores, labels)
    if isinstance(k, bool) or int(k) != k or not 1 <= int(k) <= y.size:
        raise InputError(f"k must be an integer in [1, {y.size}], got {k!r}", field="k")
    top = np.argsort(-s, kind="stable")[: int(k)]
    return float(y[top].mean())


def threshold_metrics(scores: npt.ArrayLike, labels: npt.ArrayLike, threshold: float) -> ThresholdMetrics:
    """Confusion matrix, accuracy, precision, recall and F1 of ``predict 1 if score >= threshold``.

    Example:
        >>> m = threshold_metrics([0.9, 0.6, 0.5, 0.2], [1, 0, 1, 0], threshold=0.5)
        >>> (m.tp, m.fp, m.tn, m.fn), m.precision, m.recall
        ((2, 1, 1, 0), 0.6666666666666666, 1.0)
    """
    s, y = check_pair(scores, labels)
    thr = float(threshold)
    if math.isnan(thr):
        raise InputError("threshold is NaN", field="threshold")
    pred = s >= thr
    tp, fp = int(np.sum(pred & (y == 1))), int(np.sum(pred & (y == 0)))
    fn, tn = int(np.sum(~pred & (y == 1))), int(np.sum(~pred & (y == 0)))
    precision = tp / (tp + fp) if tp + fp else None
    recall = tp / (tp + fn) if tp + fn else None
    f1 = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else None
    return ThresholdMetrics(thr, tp, fp, tn, fn, (tp + tn) / y.size, precision, recall, f1)


# --------------------------------------------------------------------------- summary


def summarize(
    scores: npt.ArrayLike,
    labels: npt.ArrayLike,
    *,
    rng: np.random.Generator | int | None = 0,
    n_resamples: int = 1000,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """The machine-readable metric summary used by leaderboards.

    Keys (always present, values JSON-serialisable): ``roc_auc``, ``roc_auc_ci``
    (``[low, high]``), ``tpr_at_1pct_fpr``, ``tpr_at_5pct_fpr``, ``fpr_at_95_tpr``,
    ``precision_at_10``, ``n``, ``n_pos``, ``n_neg``, ``reason``. With a single class the
    metrics needing both classes are ``None`` and ``reason`` says why (it is ``None``
    otherwise). ``precision_at_10`` is ``None`` when n < 10.

    Example:
        >>> d = summarize([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1], n_resamples=100)
        >>> d["roc_auc"], d["n_pos"], d["reason"]
        (0.75, 2, None)
        >>> summarize([0.1, 0.4], [1, 1])["roc_auc"] is None
        True
    """
    s, y = check_pair(scores, labels)
    est = auc_ci(s, y, n_resamples=n_resamples, confidence=confidence, rng=rng)
    both = est.reason is None
    return {
        "roc_auc": est.estimate,
        "roc_auc_ci": [est.ci_low, est.ci_high] if both else None,
        "tpr_at_1pct_fpr": tpr_at_fpr(s, y, 0.01) if both else None,
        "tpr_at_5pct_fpr": tpr_at_fpr(s, y, 0.05) if both else None,
        "fpr_at_95_tpr": fpr_at_tpr(s, y, 0.95) if both else None,
        "precision_at_10": precision_at_k(s, y, 10) if y.size >= 10 else None,
        "n": est.n,
        "n_pos": est.n_pos,
        "n_neg": est.n_neg,
        "reason": est.reason,
    }
