"""SCAR's layerwise geometry: spectral slope and curvature, thermodynamic length, belief drift.

Pure numpy (scipy only for the optional Savitzky-Golay filter). Inputs are stacked hidden
states ``H[row, state, d_model]`` (state 0 = embeddings, state ``l`` = output of block ``l``)
and, for the drift, gradients of the same shape. Every function can work on a **subset of
rows** through a precomputed Gram matrix, so permutation and bootstrap resamples never
touch the ``d_model``-dimensional data more than once (see :func:`gram_matrices`).

Choices the SCAR paper leaves open (all documented in ``docs/scar.md``):

* **Spectrum.** Eigenvalues of the covariance of the centred rows (``1/(n-1)``), computed
  from the ``n x n`` centred Gram matrix (same non-zero spectrum as the ``d x d`` covariance).
  ``k`` must not exceed the rank ``n - 1``; resamples with duplicated rows use the positive
  part of their spectrum (``k`` capped at the resample's numerical rank).
* **Slope.** ``"loglog"`` (default): the power-law exponent, minus the least-squares slope of
  ``log lambda_i`` on ``log i`` for ``i = 1..k`` (scale-free; a spectrum ``lambda_i ~ i^-a``
  gives ``a``). ``"drop"``: the paper's eigen-drop ``sum_i (lambda_i - lambda_{i+1}) /
  sum_i lambda_i``, which telescopes to ``(lambda_1 - lambda_k) / sum_{i<=k} lambda_i``.
* **Metric.** ``"whitened"`` (default): ``G_l`` = inverse of the Ledoit-Wolf shrunk
  covariance of layer ``l``'s rows (the start of the step), evaluated with the Woodbury
  identity in the ``n``-dimensional row space. ``"cka"``: ``1 - linear CKA(H_l, H_{l+1})``.
  ``"euclidean"``: ``||dmu||``.
* **Robust z.** ``(x - median) / MAD`` with the plain MAD, as the paper writes it (no 1.4826
  factor); a zero MAD falls back to the mean absolute deviation, and a constant curve gets
  z = 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from mnemoscope.errors import InputError

__all__ = [
    "Center",
    "LayerSignals",
    "Metric",
    "SlopeMethod",
    "curvature",
    "drift_vectors",
    "gram_matrices",
    "layer_signals",
    "ledoit_wolf_shrinkage",
    "robust_z",
    "savgol",
    "spectra",
    "spectral_slope",
    "thermodynamic_length",
]

SlopeMethod = Literal["loglog", "drop"]
Metric = Literal["whitened", "cka", "euclidean"]
Center = Literal["median", "mean"]

_RANK_TOL = 1e-10
_MIN_SHRINK = 1e-8
_RIDGE_FLOOR = 1e-9


@dataclass(frozen=True)
class LayerSignals:
    """Signals of one set of rows, per hidden state (``S`` states) or step (``S - 1``).

    Attributes:
        slope: ``[S]`` spectral slope of each state.
        length: ``[S-1]`` thermodynamic length of the step from state ``l`` to ``l + 1``.
        drift: ``[S d_model]`` mean (or median) gradient per state, or ``None`` without gradients.
        k: the number of eigenvalues used (after capping at the rank of the rows).
    """

    slope: np.ndarray
    length: np.ndarray
    drift: np.ndarray | None
    k: int

    @property
    def kappa(self) -> np.ndarray:
        """``[S-2]`` curvature of the slope at states ``1..S-2``."""
        return curvature(self.slope)

    @property
    def drift_norm(self) -> np.ndarray | None:
        """``[S]`` Euclidean norm of the drift vector per state."""
        return None if self.drift is None else np.linalg.norm(self.drift, axis=-1)


# -- robust scaling and smoothing -------------------------------------------------------------------


def robust_z(x: npt.ArrayLike) -> np.ndarray:
    """Robust z-scores ``(x - median) / MAD`` along the last axis.

    Example:
        >>> robust_z([1.0, 2.0, 3.0, 4.0, 100.0]).tolist()
        [-2.0, -1.0, 0.0, 1.0, 97.0]
    """
    a = np.asarray(x, dtype=np.float64)
    med = np.median(a, axis=-1, keepdims=True)
    dev = np.abs(a - med)
    mad = np.median(dev, axis=-1, keepdims=True)
    fallback = np.mean(dev, axis=-1, keepdims=True)
    scale = np.where(mad > 0, mad, fallback)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(scale > 0, (a - med) / np.where(scale > 0, scale, 1.0), 0.0)
    return np.asarray(z, dtype=np.float64)


def savgol(x: npt.ArrayLike, window: int = 3, polyorder: int = 1) -> np.ndarray:
    """Savitzky-Golay smoothing along the last axis (``window=3, polyorder=1`` = 3-point mean
    inside, a linear fit at the two ends)."""
    from scipy.signal import savgol_filter

    a = np.asarray(x, dtype=np.float64)
    if window < 3 or window % 2 == 0 or polyorder >= window:
        raise InputError(f"window must be odd and >= 3 with polyorder < window, got {window}/{polyorder}")
    if a.shape[-1] < window:
        return a.copy()
    return np.asarray(savgol_filter(a, window, polyorder, axis=-1, mode="interp"), dtype=np.float64)


def curvature(s: npt.ArrayLike) -> np.ndarray:
    """``kappa(l) = |s(l+1) - 2 s(l) + s(l-1)|`` for the interior points ``l = 1..len-2``.

    Example:
        >>> curvature([0.0, 1.0, 4.0, 9.0]).tolist()
        [2.0, 2.0]
    """
    a = np.asarray(s, dtype=np.float64)
    return np.abs(a[..., 2:] - 2.0 * a[..., 1:-1] + a[..., :-2])


# -- Gram matrices and spectra ---------------------------------------------------------------------


def gram_matrices(H: npt.ArrayLike) -> np.ndarray:
    """``[S n n]`` uncentred Gram matrices ``H[:, l] H[:, l]^T`` of ``H[n, S, d]`` (float64)."""
    a = np.asarray(H, dtype=np.float64)
    if a.ndim != 3:
        raise InputError(f"hidden states must be [row state d_model], got shape {a.shape}", field="hidden")
    return np.einsum("isd,jsd->sij", a, a, optimize=True)


def _centred(K: np.ndarray) -> np.ndarray:
    rm = K.mean(axis=-1, keepdims=True)
    cm = K.mean(axis=-2, keepdims=True)
    return K - rm - cm + K.mean(axis=(-2, -1), keepdims=True)


def _sub_gram(gram: np.ndarray, rows: np.ndarray) -> np.ndarray:
    return _centred(gram[:, rows[:, None], rows[None, :]])


def spectra(
    H: npt.ArrayLike, k: int, *, rows: npt.ArrayLike | None = None, gram: np.ndarray | None = None
) -> np.ndarray:
    """``[S k]`` top-``k`` covariance eigenvalues (descending) of each state's centred rows.

    Eigenvalues below ``1e-10 * lambda_1`` are set to 0 (they are beyond the numerical rank).

    Raises:
        InputError: ``k`` exceeds ``min(n - 1, d_model)`` for the distinct rows used.
    """
    a = np.asarray(H, dtype=np.float64)
    idx = np.arange(a.shape[0]) if rows is None else np.asarray(rows, dtype=np.int64)
    n_distinct = np.unique(idx).size
    if k < 2:
        raise InputError(f"k must be >= 2, got {k}", field="k")
    if k > min(n_distinct - 1, a.shape[2]):
        raise InputError(
            f"k={k} needs at least {k + 1} prompts (and d_model >= k); got {n_distinct} prompts, "
            f"d_model={a.shape[2]}",
            field="k",
        )
    g = gram_matrices(a) if gram is None else gram
    return _top_eigs(_sub_gram(g, idx), idx.size, k)


def _top_eigs(Kc: np.ndarray, m: int, k: int) -> np.ndarray:
    ev = np.linalg.eigvalsh(Kc)[..., ::-1][..., :k] / max(m - 1, 1)
    top = ev[..., :1]
    return np.where(ev > _RANK_TOL * np.maximum(top, 1e-300), ev, 0.0)


def spectral_slope(eigs: npt.ArrayLike, method: SlopeMethod = "loglog") -> np.ndarray:
    """Spectral slope of each row of ``eigs[..., k]`` (descending eigenvalues).

    ``"loglog"``: minus the OLS slope of ``log lambda_i`` on ``log i`` over the positive
    eigenvalues; ``"drop"``: ``(lambda_1 - lambda_k) / sum(lambda)`` (the paper's formula).

    Example:
        >>> lam = np.arange(1, 33, dtype=float) ** -1.5
        >>> round(float(spectral_slope(lam)), 6)
        1.5
    """
    ev = np.asarray(eigs, dtype=np.float64)
    if method == "drop":
        total = ev.sum(axis=-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where(total > 0, (ev[..., 0] - ev[..., -1]) / np.where(total > 0, total, 1.0), 0.0)
        return np.asarray(out, dtype=np.float64)
    if method != "loglog":
        raise InputError(f"slope method must be 'loglog' or 'drop', got {method!r}", field="slope")
    flat = ev.reshape(-1, ev.shape[-1])
    out = np.empty(flat.shape[0])
    for r, row in enumerate(flat):
        pos = row[row > 0]
        if pos.size < 2:
            out[r] = 0.0
            continue
        x = np.log(np.arange(1, pos.size + 1, dtype=np.float64))
        y = np.log(pos)
        xc = x - x.mean()
        out[r] = -float(xc @ (y - y.mean()) / (xc @ xc))
    return out.reshape(ev.shape[:-1])


# -- thermodynamic length ------------------------------------------------------------------------


def ledoit_wolf_shrinkage(Kc: np.ndarray, d: int) -> np.ndarray:
    """Ledoit-Wolf shrinkage intensity from centred Gram matrices ``Kc[..., n, n]`` of rows in ``R^d``.

    The same number as ``sklearn.covariance.ledoit_wolf_shrinkage`` on the centred rows, computed in
    the row space: ``sum_i ||x_i||^4`` is ``sum diag(K)^2`` and ``||X^T X||_F = ||X X^T||_F``.
    """
    n = Kc.shape[-1]
    diag = np.diagonal(Kc, axis1=-2, axis2=-1)
    trace = diag.sum(axis=-1) / n  # trace of the covariance (1/n)
    mu = trace / d
    delta_ = (Kc**2).sum(axis=(-2, -1)) / n**2
    beta_ = (diag**2).sum(axis=-1)
    beta = (beta_ / n - delta_) / (d * n)
    delta = (delta_ - 2.0 * mu * trace + d * mu**2) / d
    beta = np.minimum(beta, delta)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.where(delta > 0, beta / np.where(delta > 0, delta, 1.0), 0.0)
    return np.asarray(np.clip(rho, 0.0, 1.0), dtype=np.float64)


def thermodynamic_length(
    H: npt.ArrayLike,
    *,
    metric: Metric = "whitened",
    center: Center = "median",
    rows: npt.ArrayLike | None = None,
    gram: np.ndarray | None = None,
) -> np.ndarray:
    """``[S-1]`` path increments ``L(l) = sqrt(dmu^T G_l dmu)``, ``dmu = mu_{l+1} - mu_l``.

    ``mu_l`` is the coordinate-wise median (or mean) of the rows at state ``l``; ``G_l`` the
    inverse Ledoit-Wolf covariance of state ``l`` (``"whitened"``), the identity
    (``"euclidean"``), or ``metric="cka"`` returns ``1 - linear CKA(H_l, H_{l+1})`` instead.

    Example:
        >>> H = np.zeros((4, 3, 2)); H[:, 1, 0] = 3.0; H[:, 2, 0] = 3.0
        >>> thermodynamic_length(H, metric="euclidean").tolist()
        [3.0, 0.0]
    """
    a = np.asarray(H, dtype=np.float64)
    idx = np.arange(a.shape[0]) if rows is None else np.asarray(rows, dtype=np.int64)
    X = a[idx]
    if metric == "cka":
        g = gram_matrices(a) if gram is None else gram
        Kc = _sub_gram(g, idx)
        return _cka_distance(Kc)
    mu = np.median(X, axis=0) if center == "median" else X.mean(axis=0)
    dmu = mu[1:] - mu[:-1]  # [S-1 d]
    if metric == "euclidean":
        return np.asarray(np.linalg.norm(dmu, axis=-1), dtype=np.float64)
    if metric != "whitened":
        raise InputError(f"metric must be 'whitened', 'cka' or 'euclidean', got {metric!r}", field="metric")
    g = gram_matrices(a) if gram is None else gram
    Kc = _sub_gram(g, idx)[:-1]
    return _whitened_length(X[:, :-1], Kc, dmu)


def _whitened_length(X: np.ndarray, Kc: np.ndarray, dmu: np.ndarray) -> np.ndarray:
    m, _, d = X.shape
    Xc = X - X.mean(axis=0, keepdims=True)
    rho = np.maximum(ledoit_wolf_shrinkage(Kc, d), _MIN_SHRINK)
    trace = np.trace(Kc, axis1=-2, axis2=-1) / m
    mu_s = np.maximum(trace / d, 1e-300)
    a = (1.0 - rho) / m
    b = rho * mu_s
    w = np.einsum("msd,sd->sm", Xc, dmu)  # X dmu per step
    # (b I + a X^T X)^{-1} = (1/b) [I - X^T ((b/a) I + X X^T)^{-1} X]  (Woodbury)
    ratio = np.where(a > 0, b / np.where(a > 0, a, 1.0), np.inf)
    # the centred Gram is singular: keep the ridge well above round-off when LW picks ~0 shrinkage
    # (a state without variance, e.g. identical embeddings of a shared last token, gets a unit ridge)
    tiny = trace <= 1e-12 * max(float(trace.max()), 1e-300)
    ratio = np.where(tiny, max(float(trace.max()), 1.0), np.maximum(ratio, _RIDGE_FLOOR * trace))
    eye = np.eye(m)
    quad = np.einsum("sd,sd->s", dmu, dmu)
    finite = np.isfinite(ratio)
    if finite.any():
        A = Kc[finite] + ratio[finite, None, None] * eye
        sol = np.linalg.solve(A, w[finite][..., None])[..., 0]
        quad = quad.copy()
        quad[finite] = quad[finite] - np.einsum("sm,sm->s", w[finite], sol)
    b = np.where(tiny, max(float(trace.max()), 1.0), b)  # identity metric for a state without variance
    return np.asarray(np.sqrt(np.maximum(quad / b, 0.0)), dtype=np.float64)


def _cka_distance(Kc: np.ndarray) -> np.ndarray:
    hsic_xy = np.einsum("sij,sij->s", Kc[:-1], Kc[1:])
    norms = np.sqrt(np.einsum("sij,sij->s", Kc, Kc))
    denom = norms[:-1] * norms[1:]
    with np.errstate(invalid="ignore", divide="ignore"):
        cka = np.where(denom > 0, hsic_xy / np.where(denom > 0, denom, 1.0), 1.0)
    return np.asarray(1.0 - cka, dtype=np.float64)


# -- drift ---------------------------------------------------------------------------------------


def drift_vectors(
    grads: npt.ArrayLike, *, rows: npt.ArrayLike | None = None, aggregate: Center = "mean"
) -> np.ndarray:
    """``[S d]`` belief drift ``v(l) = E[grad_{h_l} log p(y|x)]`` over the rows (mean, or
    coordinate-wise median)."""
    g = np.asarray(grads, dtype=np.float64)
    idx = np.arange(g.shape[0]) if rows is None else np.asarray(rows, dtype=np.int64)
    sub = g[idx]
    return np.asarray(np.median(sub, axis=0) if aggregate == "median" else sub.mean(axis=0), dtype=np.float64)


# -- everything at once --------------------------------------------------------------------------


def layer_signals(
    H: npt.ArrayLike,
    grads: npt.ArrayLike | None = None,
    *,
    k: int,
    slope: SlopeMethod = "loglog",
    metric: Metric = "whitened",
    center: Center = "median",
    drift_aggregate: Center = "mean",
    rows: npt.ArrayLike | None = None,
    gram: np.ndarray | None = None,
) -> LayerSignals:
    """All SCAR signals of the rows ``rows`` of ``H[n, S, d]`` (and ``grads[n, S, d]``).

    ``k`` is checked against the number of distinct rows on the full set; on a resample with
    duplicated rows only the positive part of the spectrum enters the slope.
    """
    a = np.asarray(H, dtype=np.float64)
    if a.ndim != 3 or a.shape[1] < 3:
        raise InputError(f"hidden states must be [row state d_model] with >= 3 states, got {a.shape}")
    idx = np.arange(a.shape[0]) if rows is None else np.asarray(rows, dtype=np.int64)
    g = gram_matrices(a) if gram is None else gram
    if rows is None and k > min(a.shape[0] - 1, a.shape[2]):
        raise InputError(
            f"k={k} needs at least {k + 1} prompts (and d_model >= k); got {a.shape[0]} prompts, "
            f"d_model={a.shape[2]}",
            field="k",
        )
    Kc = _sub_gram(g, idx)
    eigs = _top_eigs(Kc, idx.size, k)
    counts = (eigs > 0).sum(axis=-1)
    k_used = int(counts[counts > 0].min()) if (counts > 0).any() else 0
    s = spectral_slope(eigs, slope)
    X = a[idx]
    if metric == "cka":
        length = _cka_distance(Kc)
    else:
        mu = np.median(X, axis=0) if center == "median" else X.mean(axis=0)
        dmu = mu[1:] - mu[:-1]
        if metric == "euclidean":
            length = np.linalg.norm(dmu, axis=-1)
        elif metric == "whitened":
            length = _whitened_length(X[:, :-1], Kc[:-1], dmu)
        else:
            raise InputError(
                f"metric must be 'whitened', 'cka' or 'euclidean', got {metric!r}", field="metric"
            )
    drift = None if grads is None else drift_vectors(grads, rows=idx, aggregate=drift_aggregate)
    return LayerSignals(slope=s, length=np.asarray(length, dtype=np.float64), drift=drift, k=k_used)
