"""Cross-validated scores under two protocols: leakage-free (default) and the paper's.

**Leakage-free** (:func:`cross_val_scores`): the whole estimator, typically a
``sklearn.pipeline.Pipeline`` holding every fitted step (scaler, direction, layer or
feature selection, classifier), is cloned and fitted on the training folds only, and
scores the held-out fold. Every sample gets exactly one out-of-fold score.

**Paper protocol** (:func:`paper_protocol_cv`): some published methods (CRM) fit an
unsupervised step (e.g. PCA directions) once on a fixed calibration subset chosen in
advance (:func:`calibration_split`), transform *all* samples with it, then run k-fold CV
over all samples, calibration samples included. Information from test folds leaks into
the transform; this mode exists to reproduce published numbers and is labelled
``protocol="paper"`` so it is never mistaken for the leakage-free estimate.

Both are deterministic under ``seed``: folds come from ``StratifiedKFold`` (or
``StratifiedGroupKFold`` with ``groups``) shuffled with ``seed``, the pooled-AUC
bootstrap uses ``seed``, and every ``random_state`` parameter of the estimator that is
left at ``None`` is set to ``seed`` (explicit values are kept).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from sklearn.base import clone
from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold

from mnemoscope.errors import InputError
from mnemoscope.stats.checks import check_labels, class_counts
from mnemoscope.stats.metrics import Estimate, auc_ci, roc_auc

__all__ = [
    "PROTOCOL_LEAKAGE_FREE",
    "PROTOCOL_PAPER",
    "CVResult",
    "calibration_split",
    "cross_val_scores",
    "paper_protocol_cv",
]

PROTOCOL_LEAKAGE_FREE = "leakage-free"
PROTOCOL_PAPER = "paper"


@dataclass(frozen=True, eq=False)
class CVResult:
    """Out-of-fold scores and AUCs of one cross-validation run.

    Attributes:
        oof_scores: ``[n]`` out-of-fold score of every sample (predict_proba[:, 1] or
            decision_function of the model that did not see it); read-only.
        folds: ``[n]`` index of the test fold of every sample; read-only.
        fold_aucs: AUC of each test fold (``None`` where a fold has a single class, which
            can only happen with ``groups``).
        auc: pooled out-of-fold AUC with a stratified-bootstrap CI.
        protocol: ``"leakage-free"`` or ``"paper"``.
        n_splits, seed: the CV settings.
        n_calibration: size of the calibration subset (0 for the leakage-free protocol).
        calibration_idx: the calibration indices (``None`` for the leakage-free protocol).
    """

    oof_scores: np.ndarray
    folds: np.ndarray
    fold_aucs: tuple[float | None, ...]
    auc: Estimate
    protocol: str
    n_splits: int
    seed: int
    n_calibration: int = 0
    calibration_idx: np.ndarray | None = None

    def to_dict(self, include_scores: bool = False) -> dict[str, Any]:
        """A JSON-serialisable dict (per-sample arrays only if ``include_scores``)."""
        d: dict[str, Any] = {
            "protocol": self.protocol,
            "auc": self.auc.to_dict(),
            "fold_aucs": list(self.fold_aucs),
            "n_splits": self.n_splits,
            "seed": self.seed,
            "n_calibration": self.n_calibration,
        }
        if include_scores:
            d["oof_scores"] = self.oof_scores.tolist()
            d["folds"] = self.folds.tolist()
            d["calibration_idx"] = None if self.calibration_idx is None else self.calibration_idx.tolist()
        return d


# --------------------------------------------------------------------------- helpers


def _check_seed(seed: int) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"seed must be a non-negative integer, got {seed!r}", field="seed")
    return int(seed)


def _check_xy(X: Any, y: npt.ArrayLike, n_splits: int) -> tuple[Any, np.ndarray]:
    if isinstance(n_splits, bool) or int(n_splits) != n_splits or int(n_splits) < 2:
        raise InputError(f"n_splits must be an integer >= 2, got {n_splits!r}", field="n_splits")
    labels = check_labels(y)
    if not hasattr(X, "iloc") and not hasattr(X, "subset"):
        X = np.asarray(X)
    if len(X) != labels.size:
        raise InputError(f"X and y differ in length: {len(X)} vs {labels.size}")
    n_pos, n_neg = class_counts(labels)
    if n_pos == 0 or n_neg == 0:
        raise InputError(f"cross-validation needs both classes, got n_pos={n_pos}, n_neg={n_neg}", field="y")
    if min(n_pos, n_neg) < n_splits:
        raise InputError(
            f"the minority class has fewer samples than n_splits={int(n_splits)} "
            f"(n_pos={n_pos}, n_neg={n_neg}); every fold needs both classes",
            field="y",
        )
    return X, labels


def _take(X: Any, idx: np.ndarray) -> Any:
    """Rows of X: DataFrames by ``iloc``, sample containers (e.g. ``CRMData``) by ``subset``."""
    if hasattr(X, "iloc"):
        return X.iloc[idx]
    if hasattr(X, "subset"):
        return X.subset(idx)
    return X[idx]


def _seeded_clone(estimator: Any, seed: int) -> Any:
    est = clone(estimator)
    unset = {
        k: seed for k, v in est.get_params(deep=True).items() if k.endswith("random_state") and v is None
    }
    if unset:
        est.set_params(**unset)
    return est


def _positive_scores(est: Any, X: Any) -> np.ndarray:
    if hasattr(est, "predict_proba"):
        proba = np.asarray(est.predict_proba(X))
        classes = list(getattr(est, "classes_", [0, 1]))
        if 1 not in classes:
            raise InputError(f"the fitted estimator has classes {classes}, expected 0 and 1")
        return proba[:, classes.index(1)].astype(np.float64)
    if hasattr(est, "decision_function"):
        dec = np.asarray(est.decision_function(X), dtype=np.float64)
        return dec[:, -1] if dec.ndim == 2 else dec
    raise InputError(f"{type(est).__name__} has neither predict_proba nor decision_function; cannot score")


def _splitter(n_splits: int, seed: int, groups: npt.ArrayLike | None, n: int) -> tuple[Any, Any]:
    if groups is None:
        return StratifiedKFold(n_splits=n_splits, shuffle=True, random_state=seed), None
    g = np.asarray(groups)
    if g.ndim != 1 or g.shape[0] != n:
        raise InputError(f"groups must be 1-D of length {n}, got shape {g.shape}", field="groups")
    n_groups = np.unique(g).size
    if n_groups < n_splits:
        raise InputError(f"{n_groups} distinct groups is fewer than n_splits={n_splits}", field="groups")
    return StratifiedGroupKFold(n_splits=n_splits, shuffle=True, random_state=seed), g


def _run_folds(
    estimator: Any,
    X: Any,
    y: np.ndarray,
    n_splits: int,
    seed: int,
    groups: npt.ArrayLike | None,
) -> tuple[np.ndarray, np.ndarray, tuple[float | None, ...]]:
    splitter, g = _splitter(n_splits, seed, groups, y.size)
    oof = np.full(y.size, np.nan)
    folds = np.full(y.size, -1, dtype=np.int64)
    fold_aucs: list[float | None] = []
    for k, (train, test) in enumerate(splitter.split(np.zeros(y.size), y, g)):
        if np.unique(y[train]).size < 2:
            raise InputError(f"training folds of fold {k} contain a single class; use fewer splits")
        est = _seeded_clone(estimator, seed)
        est.fit(_take(X, train), y[train])
        s = _positive_scores(est, _take(X, test))
        if s.shape != test.shape or not np.isfinite(s).all():
            raise InputError(f"fold {k}: the estimator returned non-finite or misshaped scores")
        oof[test] = s
        folds[test] = k
        fold_aucs.append(roc_auc(s, y[test]))
    oof.setflags(write=False)
    folds.setflags(write=False)
    return oof, folds, tuple(fold_aucs)


# --------------------------------------------------------------------------- public API


def cross_val_scores(
    estimator: Any,
    X: Any,
    y: npt.ArrayLike,
    *,
    n_splits: int = 5,
    seed: int = 42,
    groups: npt.ArrayLike | None = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
) -> CVResult:
    """Leakage-free stratified k-fold out-of-fold scores of any sklearn estimator or Pipeline.

    The estimator is cloned (``sklearn.base.clone``) for each fold and fitted on the
    training folds only, so every fitted step inside it never sees the test fold. Put all
    data-dependent preprocessing inside the estimator (a ``Pipeline``).

    Args:
        estimator: an unfitted sklearn classifier or Pipeline with ``predict_proba`` or
            ``decision_function``.
        X: ``[n, ...]`` features (array-like or DataFrame).
        y: ``[n]`` 0/1 labels.
        n_splits: number of folds; both classes need at least ``n_splits`` samples.
        seed: shuffles the folds, seeds the bootstrap and unset ``random_state`` params.
        groups: optional ``[n]`` group ids kept within one fold (``StratifiedGroupKFold``).
        n_resamples, confidence: bootstrap settings of the pooled AUC's CI.

    Returns:
        :class:`CVResult` with ``protocol="leakage-free"``.

    Raises:
        InputError: single class, a minority class smaller than ``n_splits``, mismatched
            lengths, or an estimator that cannot score.

    Example:
        >>> from sklearn.linear_model import LogisticRegression
        >>> rng = np.random.default_rng(0)
        >>> y = np.repeat([0, 1], 20)
        >>> X = rng.normal(size=(40, 3)) + y[:, None]
        >>> r = cross_val_scores(LogisticRegression(), X, y, n_resamples=100)
        >>> r.protocol, r.oof_scores.shape, r.auc.estimate > 0.8
        ('leakage-free', (40,), True)
    """
    seed = _check_seed(seed)
    X, labels = _check_xy(X, y, n_splits)
    oof, folds, fold_aucs = _run_folds(estimator, X, labels, int(n_splits), seed, groups)
    auc = auc_ci(oof, labels, n_resamples=n_resamples, confidence=confidence, rng=seed)
    return CVResult(oof, folds, fold_aucs, auc, PROTOCOL_LEAKAGE_FREE, int(n_splits), seed)


def calibration_split(y: npt.ArrayLike, n_cal: int = 100, seed: int = 42) -> np.ndarray:
    """Stratified random calibration indices (sorted), drawn without replacement.

    Each class gets a share of ``n_cal`` proportional to its size (rounded), and when
    ``n_cal >= 2`` and both classes exist, at least one sample of each.

    Example:
        >>> calibration_split(np.repeat([0, 1], [30, 10]), n_cal=8, seed=0).size
        8
    """
    labels = check_labels(y)
    seed = _check_seed(seed)
    n = labels.size
    if isinstance(n_cal, bool) or int(n_cal) != n_cal or not 1 <= int(n_cal) <= n:
        raise InputError(f"n_cal must be an integer in [1, {n}], got {n_cal!r}", field="n_cal")
    n_cal = int(n_cal)
    n_pos, n_neg = class_counts(labels)
    k_pos = round(n_cal * n_pos / n)
    if n_cal >= 2 and n_pos and n_neg:
        k_pos = min(max(k_pos, 1), n_cal - 1)
    k_pos = min(max(k_pos, n_cal - n_neg), n_pos)
    gen = np.random.default_rng(seed)
    pos = gen.choice(np.flatnonzero(labels == 1), size=k_pos, replace=False)
    neg = gen.choice(np.flatnonzero(labels == 0), size=n_cal - k_pos, replace=False)
    return np.sort(np.concatenate([pos, neg])).astype(np.int64)


def paper_protocol_cv(
    make_estimator: Callable[[], Any] | Any,
    X: Any,
    y: npt.ArrayLike,
    calibration_idx: npt.ArrayLike,
    fit_calibration: Callable[[Any, np.ndarray], Callable[[Any], Any]],
    *,
    n_splits: int = 5,
    seed: int = 42,
    n_resamples: int = 1000,
    confidence: float = 0.95,
) -> CVResult:
    """The paper protocol: a calibration-fitted transform applied to all X, then k-fold CV.

    ``fit_calibration(X[calibration_idx], y[calibration_idx])`` returns a transform
    (a callable ``X -> X'``), which is applied to *all* samples; then stratified k-fold CV
    runs over all samples, calibration ones included (this leaks on purpose, to
    reproduce published numbers). The estimator is fitted inside the folds as in
    :func:`cross_val_scores`.

    Args:
        make_estimator: a zero-argument factory of an unfitted estimator, or an estimator
            (cloned per fold).
        X, y: features and 0/1 labels.
        calibration_idx: indices of the calibration subset (e.g. from :func:`calibration_split`).
        fit_calibration: ``(X_cal, y_cal) -> transform``.
        n_splits, seed, n_resamples, confidence: as in :func:`cross_val_scores`.

    Returns:
        :class:`CVResult` with ``protocol="paper"`` and ``n_calibration`` recorded.

    Example:
        >>> from sklearn.decomposition import PCA
        >>> from sklearn.linear_model import LogisticRegression
        >>> rng = np.random.default_rng(0)
        >>> y = np.repeat([0, 1], 20)
        >>> X = rng.normal(size=(40, 5)) + y[:, None]
        >>> cal = calibration_split(y, n_cal=10)
        >>> fit_pca = lambda Xc, yc: PCA(n_components=2).fit(Xc).transform
        >>> r = paper_protocol_cv(LogisticRegression, X, y, cal, fit_pca, n_resamples=100)
        >>> r.protocol, r.n_calibration
        ('paper', 10)
    """
    seed = _check_seed(seed)
    X, labels = _check_xy(X, y, n_splits)
    cal = np.asarray(calibration_idx)
    if cal.ndim != 1 or cal.size == 0 or cal.dtype.kind not in "iu":
        raise InputError(
            "calibration_idx must be a non-empty 1-D array of integer indices", field="calibration_idx"
        )
    if cal.min() < 0 or cal.max() >= labels.size:
        raise InputError(f"calibration_idx out of range [0, {labels.size})", field="calibration_idx")
    if np.unique(cal).size != cal.size:
        raise InputError("calibration_idx contains duplicates", field="calibration_idx")
    cal = np.sort(cal).astype(np.int64)
    transform = fit_calibration(_take(X, cal), labels[cal])
    if not callable(transform):
        raise InputError("fit_calibration must return a callable transform X -> X'")
    Xt = transform(X)
    if len(Xt) != labels.size:
        raise InputError(f"the calibration transform returned {len(Xt)} rows for {labels.size} samples")
    is_instance = hasattr(make_estimator, "get_params") and not isinstance(make_estimator, type)
    estimator = make_estimator if is_instance else make_estimator()
    oof, folds, fold_aucs = _run_folds(estimator, Xt, labels, int(n_splits), seed, None)
    auc = auc_ci(oof, labels, n_resamples=n_resamples, confidence=confidence, rng=seed)
    cal.setflags(write=False)
    return CVResult(
        oof,
        folds,
        fold_aucs,
        auc,
        PROTOCOL_PAPER,
        int(n_splits),
        seed,
        n_calibration=int(cal.size),
        calibration_idx=cal,
    )
