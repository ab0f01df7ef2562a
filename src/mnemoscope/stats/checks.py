"""Input validation shared by the statistics modules: one error message per kind of bad input.

>>> class_counts(check_labels([1, 0, 1]))
(2, 1)
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from mnemoscope.errors import InputError

__all__ = [
    "check_confidence",
    "check_labels",
    "check_n_resamples",
    "check_pair",
    "check_rate",
    "check_scores",
    "class_counts",
    "single_class_reason",
]


def check_scores(scores: npt.ArrayLike, name: str = "scores") -> np.ndarray:
    try:
        s = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise InputError(f"{name} must be numeric ({e})", field=name) from None
    if s.ndim != 1:
        raise InputError(f"{name} must be 1-D, got shape {s.shape}", field=name)
    if s.size == 0:
        raise InputError(f"{name} is empty", field=name)
    bad = np.flatnonzero(~np.isfinite(s))
    if bad.size:
        msg = f"{name} contain {bad.size} non-finite value(s) (NaN or inf), first at index {bad[0]}: {s[bad[0]]}"
        raise InputError(msg, field=name)
    return s


def check_labels(labels: npt.ArrayLike) -> np.ndarray:
    raw = np.asarray(labels)
    if raw.ndim != 1:
        raise InputError(f"labels must be 1-D, got shape {raw.shape}", field="labels")
    if raw.size == 0:
        raise InputError("labels is empty", field="labels")
    if raw.dtype.kind not in "biuf":
        raise InputError(f"labels must be numeric 0/1, got dtype {raw.dtype}", field="labels")
    bad = raw[(raw != 0) & (raw != 1)]
    if bad.size:
        raise InputError(f"labels must be 0 or 1, found {np.unique(bad)[:5].tolist()}", field="labels")
    return raw.astype(np.int64)


def check_pair(scores: npt.ArrayLike, labels: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    s = check_scores(scores)
    y = check_labels(labels)
    if s.shape[0] != y.shape[0]:
        raise InputError(f"scores and labels differ in length: {s.shape[0]} vs {y.shape[0]}")
    return s, y


def class_counts(y: np.ndarray) -> tuple[int, int]:
    return int(y.sum()), int(y.size - y.sum())


def single_class_reason(n_pos: int, n_neg: int, strict: bool = False) -> str | None:
    """The single-class reason (or ``None``); raises instead when ``strict``."""
    if n_pos and n_neg:
        return None
    reason = f"only one class present (n_pos={n_pos}, n_neg={n_neg})"
    if strict:
        raise InputError(f"ROC-AUC is undefined: {reason}", field="labels")
    return reason


def check_confidence(confidence: float) -> float:
    if not 0.0 < float(confidence) < 1.0:
        raise InputError(f"confidence must be in (0, 1), got {confidence}", field="confidence")
    return float(confidence)


def check_n_resamples(n: int, name: str = "n_resamples") -> int:
    if isinstance(n, bool) or int(n) != n or int(n) < 1:
        raise InputError(f"{name} must be a positive integer, got {n!r}", field=name)
    return int(n)


def check_rate(value: float, name: str) -> float:
    if not 0.0 <= float(value) <= 1.0:
        raise InputError(f"{name} must be in [0, 1], got {value}", field=name)
    return float(value)
