"""Split-conformal thresholds: the one place a finite-sample false-flag guarantee is computed.

Given n calibration scores of the *clean* condition and a new clean score exchangeable with
them, the rank of the new score among all n + 1 is uniform (no ties), which gives:

* :func:`conformal_lower`: tau = the ``floor(alpha (n + 1))``-th smallest score, so that
  ``P(new < tau) <= alpha`` (RePCS: a small Z is flagged);
* :func:`conformal_upper`: t = the ``ceil((1 - alpha)(n + 1))``-th smallest score, so that
  ``P(new > t) <= alpha`` (a large anomaly score or memory probability is flagged).

Both are undefined when n is too small for alpha (fewer than ``1/alpha - 1`` scores): they
then return ``-inf`` / ``inf`` (nothing is ever flagged) and :func:`min_n_for_alpha` says how
many clean scores would certify alpha.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from mnemoscope.errors import InputError

__all__ = ["conformal_lower", "conformal_upper", "min_n_for_alpha"]


def _prepare(scores: Sequence[float] | np.ndarray, alpha: float) -> np.ndarray:
    if not 0 < alpha < 1:
        raise InputError(f"alpha must be in (0, 1), got {alpha}", field="alpha")
    s = np.sort(np.asarray(scores, dtype=np.float64).ravel())
    if not np.all(np.isfinite(s)):
        raise InputError("conformal calibration scores contain NaN or inf")
    return s


def conformal_lower(scores: Sequence[float] | np.ndarray, alpha: float) -> float:
    """The ``floor(alpha (n + 1))``-th smallest score; ``-inf`` when n is too small.

    Example:
        >>> conformal_lower(np.arange(1, 20), 0.05)
        1.0
        >>> conformal_lower([1.0, 2.0], 0.05)
        -inf
    """
    s = _prepare(scores, alpha)
    k = math.floor(alpha * (len(s) + 1))
    return float(s[k - 1]) if k >= 1 else -math.inf


def conformal_upper(scores: Sequence[float] | np.ndarray, alpha: float) -> float:
    """The ``ceil((1 - alpha)(n + 1))``-th smallest score; ``inf`` when n is too small.

    For a new score exchangeable with ``scores``, ``P(new > threshold) <= alpha``.

    Example:
        >>> conformal_upper(np.arange(1, 20), 0.05)
        19.0
        >>> conformal_upper([1.0, 2.0], 0.05)
        inf
    """
    s = _prepare(scores, alpha)
    k = math.ceil((1 - alpha) * (len(s) + 1))
    return float(s[k - 1]) if 1 <= k <= len(s) else math.inf


def min_n_for_alpha(alpha: float) -> int:
    """The smallest number of calibration scores for which alpha can be certified.

    Example:
        >>> min_n_for_alpha(0.05), min_n_for_alpha(0.1)
        (19, 9)
    """
    if not 0 < alpha < 1:
        raise InputError(f"alpha must be in (0, 1), got {alpha}", field="alpha")
    n = 1
    while math.floor(alpha * (n + 1)) < 1:
        n += 1
    return n
