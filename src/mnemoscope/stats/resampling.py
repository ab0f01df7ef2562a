"""Resampling inference: permutation tests, Benjamini-Hochberg FDR control, bootstrap CIs.

All p-values from permutations use the "+1" correction (Phipson & Smyth, 2010):
``p = (1 + #{null >= observed}) / (1 + n_permutations)``, which counts the observed
labelling as one of the permutations, so a p-value is never 0 and the test is valid
(exact, slightly conservative) for any number of permutations. Ties with the observed
value count as "at least as extreme" (a relative tolerance of 100 machine epsilons
guards against round-off, as in ``scipy.stats.permutation_test``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from scipy.stats import false_discovery_control, rankdata

from mnemoscope.errors import InputError
from mnemoscope.stats.checks import (
    check_confidence,
    check_n_resamples,
    check_pair,
    class_counts,
    single_class_reason,
)
from mnemoscope.stats.metrics import Estimate

__all__ = [
    "PermutationResult",
    "bh_adjust",
    "bh_reject",
    "bootstrap_ci",
    "permutation_pvalues",
    "permutation_test_auc",
]

_CHUNK_CELLS = 4_000_000


@dataclass(frozen=True, eq=False)
class PermutationResult:
    """Result of :func:`permutation_test_auc`.

    Attributes:
        observed: the AUC of the actual labelling.
        null: ``[n_permutations]`` AUCs under random relabellings (read-only array).
        pvalue: ``(1 + #{null at least as extreme}) / (1 + n_permutations)``.
        n_permutations: permutations drawn.
        alternative: ``"greater"`` (AUC > 0.5) or ``"two-sided"`` (|AUC - 0.5|).
        n, n_pos, n_neg: sample and class sizes.
    """

    observed: float
    null: np.ndarray
    pvalue: float
    n_permutations: int
    alternative: str
    n: int
    n_pos: int
    n_neg: int

    def to_dict(self, include_null: bool = False) -> dict[str, Any]:
        """A JSON-serialisable dict (the null distribution only if ``include_null``)."""
        d: dict[str, Any] = {
            "observed": self.observed,
            "pvalue": self.pvalue,
            "n_permutations": self.n_permutations,
            "alternative": self.alternative,
            "n": self.n,
            "n_pos": self.n_pos,
            "n_neg": self.n_neg,
        }
        if include_null:
            d["null"] = self.null.tolist()
        return d


def permutation_pvalues(
    observed: npt.ArrayLike,
    null: npt.ArrayLike,
    *,
    alternative: Literal["greater", "less"] = "greater",
) -> np.ndarray:
    """Per-column permutation p-values with the +1 correction.

    Args:
        observed: ``[m]`` observed statistics (a scalar is treated as ``m = 1``).
        null: ``[n_perm, m]`` statistics under the null (``[n_perm]`` when ``m = 1``).
        alternative: ``"greater"`` counts ``null >= observed``, ``"less"`` counts
            ``null <= observed``. For a two-sided test pass ``|stat - center|``.

    Returns:
        ``[m]`` p-values ``(1 + count) / (1 + n_perm)``.

    Example:
        >>> permutation_pvalues([0.9, 0.5], [[0.5, 0.6], [0.4, 0.5], [0.6, 0.4]]).tolist()
        [0.25, 0.75]
    """
    obs = np.atleast_1d(np.asarray(observed, dtype=np.float64))
    nul = np.asarray(null, dtype=np.float64)
    if obs.ndim != 1:
        raise InputError(f"observed must be 1-D, got shape {obs.shape}", field="observed")
    if nul.ndim == 1 and obs.size == 1:
        nul = nul[:, None]
    if nul.ndim != 2 or nul.shape[1] != obs.size or nul.shape[0] == 0:
        raise InputError(
            f"null must have shape (n_perm >= 1, {obs.size}), got {nul.shape}",
            field="null",
        )
    if not (np.isfinite(obs).all() and np.isfinite(nul).all()):
        raise InputError("observed and null must be finite (no NaN or inf)")
    gamma = np.abs(obs) * np.finfo(np.float64).eps * 100
    if alternative == "greater":
        count = (nul >= obs - gamma).sum(axis=0)
    elif alternative == "less":
        count = (nul <= obs + gamma).sum(axis=0)
    else:
        raise InputError(f"alternative must be 'greater' or 'less', got {alternative!r}", field="alternative")
    return np.asarray((1.0 + count) / (1.0 + nul.shape[0]), dtype=np.float64)


def permutation_test_auc(
    scores: npt.ArrayLike,
    labels: npt.ArrayLike,
    *,
    n_permutations: int = 1000,
    alternative: Literal["greater", "two-sided"] = "greater",
    rng: np.random.Generator | int | None = 0,
) -> PermutationResult:
    """Permutation test of "the scores carry no information about the labels" via ROC-AUC.

    The labels are shuffled ``n_permutations`` times (keeping the class counts) and the AUC
    is recomputed from the fixed score ranks, all at once. ``alternative="greater"``
    (default, one-sided: higher scores = label 1) gives
    ``p = (1 + #{null >= observed}) / (1 + n_permutations)``; ``"two-sided"`` compares
    ``|AUC - 0.5|`` instead, for a detector whose orientation is not known in advance.
    The smallest attainable p-value is ``1 / (1 + n_permutations)``.

    Both classes are required: a single class raises :class:`InputError` (there is no
    AUC to test).

    Example:
        >>> r = permutation_test_auc([0.1, 0.2, 0.3, 0.7, 0.8, 0.9], [0, 0, 0, 1, 1, 1], n_permutations=199)
        >>> r.observed, r.pvalue < 0.1
        (1.0, True)
    """
    s, y = check_pair(scores, labels)
    n_permutations = check_n_resamples(n_permutations, "n_permutations")
    if alternative not in ("greater", "two-sided"):
        raise InputError(
            f"alternative must be 'greater' or 'two-sided', got {alternative!r}", field="alternative"
        )
    n_pos, n_neg = class_counts(y)
    reason = single_class_reason(n_pos, n_neg)
    if reason is not None:
        raise InputError(f"permutation test of ROC-AUC needs both classes: {reason}", field="labels")
    gen = np.random.default_rng(rng)
    ranks2 = np.rint(2.0 * rankdata(s, method="average")).astype(np.int64)
    denom = 2.0 * n_pos * n_neg
    offset = n_pos * (n_pos + 1)
    observed = (int(ranks2[y == 1].sum()) - offset) / denom
    null = np.empty(n_permutations, dtype=np.float64)
    chunk = max(1, _CHUNK_CELLS // y.size)
    for start in range(0, n_permutations, chunk):
        b = min(chunk, n_permutations - start)
        perm = gen.permuted(np.broadcast_to(y, (b, y.size)), axis=1)
        null[start : start + b] = (perm @ ranks2 - offset) / denom
    null.setflags(write=False)
    if alternative == "greater":
        p = permutation_pvalues([observed], null)[0]
    else:
        p = permutation_pvalues([abs(observed - 0.5)], np.abs(null - 0.5))[0]
    return PermutationResult(
        observed=float(observed),
        null=null,
        pvalue=float(p),
        n_permutations=n_permutations,
        alternative=alternative,
        n=int(y.size),
        n_pos=n_pos,
        n_neg=n_neg,
    )


def _check_pvalues(pvalues: npt.ArrayLike) -> np.ndarray:
    try:
        p = np.asarray(pvalues, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise InputError(f"p-values must be numeric ({e})", field="pvalues") from None
    if p.ndim != 1:
        raise InputError(f"p-values must be 1-D, got shape {p.shape}", field="pvalues")
    if np.isnan(p).any():
        raise InputError(f"p-values contain {int(np.isnan(p).sum())} NaN value(s)", field="pvalues")
    if ((p < 0) | (p > 1)).any():
        bad = p[(p < 0) | (p > 1)][:5]
        raise InputError(f"p-values must be in [0, 1], found {bad.tolist()}", field="pvalues")
    return p


def bh_adjust(pvalues: npt.ArrayLike) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (q-values), in the input order.

    ``q_(i) = min_{j >= i} m p_(j) / j`` over the sorted p-values, capped at 1; computed by
    ``scipy.stats.false_discovery_control(p, method="bh")``. Valid under independence or
    positive dependence of the tests.

    Example:
        >>> bh_adjust([0.01, 0.04, 0.03, 0.20]).round(4).tolist()
        [0.04, 0.0533, 0.0533, 0.2]
    """
    p = _check_pvalues(pvalues)
    if p.size == 0:
        return p.copy()
    return np.asarray(false_discovery_control(p, method="bh"), dtype=np.float64)


def bh_reject(pvalues: npt.ArrayLike, alpha: float = 0.05) -> np.ndarray:
    """Which hypotheses Benjamini-Hochberg rejects at FDR level ``alpha`` (``q <= alpha``).

    Example:
        >>> bh_reject([0.01, 0.04, 0.03, 0.20], alpha=0.05).tolist()
        [True, False, False, False]
    """
    if not 0.0 < float(alpha) < 1.0:
        raise InputError(f"alpha must be in (0, 1), got {alpha}", field="alpha")
    return np.asarray(bh_adjust(pvalues) <= float(alpha), dtype=bool)


def bootstrap_ci(
    values: npt.ArrayLike,
    statistic: Callable[[np.ndarray], Any] = np.mean,
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    rng: np.random.Generator | int | None = 0,
) -> Estimate:
    """Percentile bootstrap CI of ``statistic`` over the rows of ``values``.

    Rows are resampled with replacement (``n`` out of ``n``); ``statistic`` receives an
    array shaped like ``values`` and must return a finite scalar. ``values`` must be
    numeric and finite. ``n_pos``/``n_neg`` of the result are ``None``.

    Example:
        >>> e = bootstrap_ci([1.0, 2.0, 3.0, 4.0, 5.0], n_resamples=500, rng=0)
        >>> e.estimate, e.ci_low <= 3.0 <= e.ci_high
        (3.0, True)
    """
    try:
        x = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise InputError(f"values must be numeric ({e})", field="values") from None
    if x.ndim == 0 or x.shape[0] == 0:
        raise InputError("values must have at least one row", field="values")
    if not np.isfinite(x).all():
        raise InputError("values contain NaN or inf", field="values")
    confidence = check_confidence(confidence)
    n_resamples = check_n_resamples(n_resamples)

    def stat(sample: np.ndarray) -> float:
        v = np.asarray(statistic(sample), dtype=np.float64)
        if v.size != 1 or not np.isfinite(v).all():
            raise InputError(f"statistic must return one finite number, got {v.tolist()}", field="statistic")
        return float(v.reshape(()))

    gen = np.random.default_rng(rng)
    n = x.shape[0]
    boot = np.array([stat(x[gen.integers(0, n, size=n)]) for _ in range(n_resamples)])
    alpha = 1.0 - confidence
    low, high = np.quantile(boot, [alpha / 2.0, 1.0 - alpha / 2.0])
    return Estimate(
        estimate=stat(x),
        ci_low=float(low),
        ci_high=float(high),
        n_resamples=n_resamples,
        method="bootstrap-percentile",
        confidence=confidence,
        n=int(n),
    )
