"""SCAR's detector: anchor-relative z-scores, composites, permutation tests, bands and scores."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from mnemoscope.detectors.scar.bands import rupture_bands
from mnemoscope.detectors.scar.types import (
    FIRST_LAYER,
    RULES,
    SIGNALS,
    Band,
    Reference,
    Rule,
    ScarData,
    ScarResult,
)
from mnemoscope.errors import InputError, MnemoscopeError
from mnemoscope.features.spectral import (
    Center,
    LayerSignals,
    Metric,
    SlopeMethod,
    gram_matrices,
    layer_signals,
    robust_z,
    savgol,
)
from mnemoscope.stats import Estimate, bh_adjust, bootstrap_ci, permutation_pvalues

__all__ = ["ScarDetector", "calibrate_weights", "resolve_k"]

_PROGRESS_EVERY = 100


def resolve_k(k: int | Literal["auto"], n_prompts: int, d_model: int) -> int:
    """The spectrum size: ``"auto"`` = 64 if the prompts allow it, else 32; an explicit ``k``
    must satisfy ``k <= min(n_prompts - 1, d_model)``.

    Example:
        >>> resolve_k("auto", 128, 576), resolve_k("auto", 40, 576)
        (64, 32)
    """
    cap = min(n_prompts - 1, d_model)
    if k == "auto":
        for cand in (64, 32):
            if cand <= cap:
                return cand
        raise InputError(
            f"too few prompts for the spectrum: k=32 needs at least 33 prompts, got {n_prompts}", field="k"
        )
    if int(k) < 2:
        raise InputError(f"k must be >= 2, got {k}", field="k")
    if int(k) > cap:
        raise InputError(
            f"too few prompts for k={k}: the centred covariance of {n_prompts} prompts has rank "
            f"{n_prompts - 1}; use at least {int(k) + 1} prompts or a smaller k",
            field="k",
        )
    return int(k)


@dataclass(frozen=True)
class _Profile:
    """z-scores and composites of one (pseudo-)suspect/anchor pair."""

    zs: np.ndarray  # [3 layer] suspect z (kappa, L, v) in the reference frame
    za: np.ndarray  # [3 layer] anchor's own within-model z
    T: np.ndarray
    T_hinge: np.ndarray
    T_anchor: np.ndarray
    raw: dict[str, np.ndarray]


class ScarDetector(BaseEstimator):
    """SCAR rupture detection against a clean anchor (scikit-learn style).

    ``fit(anchor)`` keeps the anchor; ``audit(suspect)`` returns a :class:`ScarResult`.

    Args:
        k: top eigenvalues of the spectrum (``"auto"``: 64 when the prompts allow, else 32).
        slope: ``"loglog"`` (power-law exponent) or ``"drop"`` (the paper's eigen-drop).
        metric: thermodynamic-length metric: ``"whitened"`` (Ledoit-Wolf), ``"cka"``, ``"euclidean"``.
        center: ``mu_l`` = coordinate-wise ``"median"`` (paper) or ``"mean"`` over prompts.
        drift: use the belief drift (needs gradients on both models).
        drift_aggregate: ``v(l)`` = ``"mean"`` (the paper's expectation) or ``"median"`` gradient.
        reference: ``"within"`` or ``"anchor_delta"`` (see the module docstring).
        smooth: Savitzky-Golay (window 3, order 1) on the z-curves.
        weights: ``(alpha, beta, gamma)``.
        percentiles: anchor percentiles for ``(tau_kappa, tau_L, tau_v)``.
        q_fdr: BH level for band acceptance.
        min_width: minimum band width.
        rule: band rule: ``"paper"`` (AND of the conditions, default), ``"any2"`` or
            ``"per_signal"`` (relaxations, see :func:`rupture_bands`).
        n_permutations, n_bootstrap, confidence: resampling settings.
        seed: seeds permutations and bootstrap.
        progress: a callable ``(done, total)`` for long resampling loops (or ``None``).
    """

    def __init__(
        self,
        *,
        k: int | Literal["auto"] = "auto",
        slope: SlopeMethod = "loglog",
        metric: Metric = "whitened",
        center: Center = "median",
        drift: bool = True,
        drift_aggregate: Center = "mean",
        reference: Reference = "within",
        smooth: bool = False,
        weights: tuple[float, float, float] = (1.0, 1.0, 1.0),
        percentiles: tuple[float, float, float] = (90.0, 10.0, 90.0),
        q_fdr: float = 0.05,
        min_width: int = 2,
        rule: Rule = "paper",
        n_permutations: int = 999,
        n_bootstrap: int = 200,
        confidence: float = 0.95,
        seed: int = 0,
        progress: Callable[[int, int], None] | None = None,
    ):
        self.k = k
        self.slope = slope
        self.metric = metric
        self.center = center
        self.drift = drift
        self.drift_aggregate = drift_aggregate
        self.reference = reference
        self.smooth = smooth
        self.weights = weights
        self.percentiles = percentiles
        self.q_fdr = q_fdr
        self.min_width = min_width
        self.rule = rule
        self.n_permutations = n_permutations
        self.n_bootstrap = n_bootstrap
        self.confidence = confidence
        self.seed = seed
        self.progress = progress

    # -- fitting ------------------------------------------------------------------------------------

    def _validate_params(self) -> None:
        choices: dict[str, tuple[Any, tuple[str, ...]]] = {
            "slope": (self.slope, ("loglog", "drop")),
            "metric": (self.metric, ("whitened", "cka", "euclidean")),
            "center": (self.center, ("median", "mean")),
            "drift_aggregate": (self.drift_aggregate, ("mean", "median")),
            "reference": (self.reference, ("within", "anchor_delta")),
            "rule": (self.rule, RULES),
        }
        for name, (value, allowed) in choices.items():
            if value not in allowed:
                raise InputError(f"{name} must be one of {', '.join(allowed)}; got {value!r}", field=name)
        if len(self.weights) != 3 or any(not np.isfinite(w) for w in self.weights):
            raise InputError(f"weights must be three finite numbers, got {self.weights}", field="weights")
        if len(self.percentiles) != 3 or any(not 0 <= p <= 100 for p in self.percentiles):
            raise InputError(f"percentiles must be three numbers in [0, 100], got {self.percentiles}")
        if not 0 < self.q_fdr < 1:
            raise InputError(f"q_fdr must be in (0, 1), got {self.q_fdr}", field="q_fdr")
        if self.min_width < 1 or self.n_permutations < 1 or self.n_bootstrap < 1:
            raise InputError("min_width, n_permutations and n_bootstrap must be >= 1")

    def fit(self, anchor: ScarData, y: None = None) -> ScarDetector:
        """Keep the clean anchor (thresholds are computed against it in :meth:`audit`)."""
        self._validate_params()
        if self.drift and anchor.grad is None:
            raise InputError(
                "drift is requested but the anchor has no gradients (prompts need targets; or disable drift)",
                field="target",
            )
        self.k_ = resolve_k(self.k, anchor.n_prompts, anchor.hidden.shape[2])
        self.anchor_ = anchor
        return self

    # -- core ---------------------------------------------------------------------------------------

    def _check_pair(self, suspect: ScarData, anchor: ScarData) -> None:
        if suspect.hidden.shape[1:] != anchor.hidden.shape[1:]:
            sa, aa = suspect.model.get("architecture"), anchor.model.get("architecture")
            raise MnemoscopeError(
                f"suspect and anchor differ in shape: {suspect.n_layers} layers x d={suspect.hidden.shape[2]} "
                f"({sa}) vs {anchor.n_layers} layers x d={anchor.hidden.shape[2]} ({aa}); SCAR compares "
                "models of the same family and size"
            )
        sa, aa = suspect.model.get("architecture"), anchor.model.get("architecture")
        if sa is not None and aa is not None and sa != aa:
            raise MnemoscopeError(f"suspect architecture '{sa}' differs from the anchor's '{aa}'")
        if suspect.ids != anchor.ids:
            diff = (
                next(i for i, (a, b) in enumerate(zip(suspect.ids, anchor.ids, strict=False)) if a != b)
                if (len(suspect.ids) == len(anchor.ids))
                else None
            )
            where = f" (first difference at row {diff})" if diff is not None else ""
            raise InputError(
                f"suspect and anchor must be traced on the same prompts in the same order{where}", field="id"
            )
        if self.drift and suspect.grad is None:
            raise InputError(
                "drift is requested but the suspect has no gradients (prompts need targets)", field="target"
            )

    def _signals(
        self, H: np.ndarray, G: np.ndarray | None, gram: np.ndarray, rows: np.ndarray
    ) -> LayerSignals:
        return layer_signals(
            H,
            G if self.drift else None,
            k=self.k_,
            slope=self.slope,
            metric=self.metric,
            center=self.center,
            drift_aggregate=self.drift_aggregate,
            rows=rows,
            gram=gram,
        )

    def _profile(self, sig_s: LayerSignals, sig_a: LayerSignals) -> _Profile:
        # layers 2..N-1: kappa index l-1, length l (step l -> l+1), drift l. Layer 1 is left out:
        # its kappa needs the embedding state, which is identical for all prompts that end in the
        # same token (e.g. "Answer:"), so its spectrum is round-off.
        def parts(sig: LayerSignals) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
            kappa = sig.kappa[1:]
            length = sig.length[2:]
            v = None if sig.drift is None else sig.drift[2:-1]
            return kappa, length, v

        ks, ls, vs = parts(sig_s)
        ka, la, va = parts(sig_a)
        n_layers = ks.shape[0]
        zero = np.zeros(n_layers)
        vs_norm = zero if vs is None else np.linalg.norm(vs, axis=-1)
        va_norm = zero if va is None else np.linalg.norm(va, axis=-1)
        v_delta = zero if vs is None or va is None else np.linalg.norm(vs - va, axis=-1)
        za = np.stack([robust_z(ka), robust_z(la), robust_z(va_norm) if self.drift else zero])
        if self.reference == "within":
            zs = np.stack([robust_z(ks), robust_z(ls), robust_z(vs_norm) if self.drift else zero])
        else:
            zs = np.stack([robust_z(ks - ka), robust_z(ls - la), robust_z(v_delta) if self.drift else zero])
        if self.smooth:
            zs, za = savgol(zs), savgol(za)
        a, b, c = (float(w) for w in self.weights)
        c = c if self.drift else 0.0
        T = a * zs[0] - b * zs[1] + c * zs[2]
        T_hinge = a * np.maximum(zs[0], 0) + b * np.maximum(-zs[1], 0) + c * np.maximum(zs[2], 0)
        T_anchor = a * za[0] - b * za[1] + c * za[2]
        raw = {
            "kappa": ks,
            "length": ls,
            "drift": vs_norm,
            "kappa_anchor": ka,
            "length_anchor": la,
            "drift_anchor": va_norm,
            "drift_delta": v_delta,
            "slope": sig_s.slope[2:-1],
            "slope_anchor": sig_a.slope[2:-1],
        }
        return _Profile(zs=zs, za=za, T=T, T_hinge=T_hinge, T_anchor=T_anchor, raw=raw)

    def _stat(self, prof: _Profile) -> np.ndarray:
        return prof.T - prof.T_anchor if self.reference == "within" else prof.T

    def _signal_stats(self, prof: _Profile) -> np.ndarray:
        """``[3 layer]`` one-sided per-signal statistics (kappa spike, length dip, drift surge):
        the suspect's z minus the anchor's (``within``) or the delta z (``anchor_delta``)."""
        z = prof.zs - prof.za if self.reference == "within" else prof.zs
        return np.stack([z[0], -z[1], z[2]])

    def _thresholds(self, za: np.ndarray) -> tuple[float, float, float]:
        pk, pl, pv = self.percentiles
        return (
            float(np.percentile(za[0], pk)),
            float(np.percentile(za[1], pl)),
            float(np.percentile(za[2], pv)),
        )

    def _raw_score(self, raw: dict[str, np.ndarray]) -> float:
        a, b, c = (float(w) for w in self.weights)
        dk = np.abs(np.diff(raw["kappa"]))
        c = c if self.drift else 0.0
        return float(a * dk.max() - b * raw["length"].min() + c * float(np.max(raw["drift"] ** 2)))

    # -- public -------------------------------------------------------------------------------------

    def audit(self, suspect: ScarData) -> ScarResult:
        """Detect rupture bands of ``suspect`` against the fitted anchor.

        BLAS runs single-threaded here: the resampling loops work on many small matrices, where
        threads only add contention (measured 15x slower on a busy 2-core machine).
        """
        from threadpoolctl import threadpool_limits

        check_is_fitted(self, "anchor_")
        with threadpool_limits(limits=1):
            return self._audit(suspect)

    def _profiler(self, suspect: ScarData) -> Callable[[np.ndarray, np.ndarray], _Profile]:
        """A function of (suspect rows, anchor rows) into the stacked ``[suspect; anchor]`` rows."""
        anchor: ScarData = self.anchor_
        self._check_pair(suspect, anchor)
        H = np.concatenate([np.asarray(suspect.hidden, np.float64), np.asarray(anchor.hidden, np.float64)])
        G = None
        if self.drift:
            assert suspect.grad is not None and anchor.grad is not None
            G = np.concatenate([np.asarray(suspect.grad, np.float64), np.asarray(anchor.grad, np.float64)])
        gram = gram_matrices(H)

        def profile(rows_s: np.ndarray, rows_a: np.ndarray) -> _Profile:
            return self._profile(self._signals(H, G, gram, rows_s), self._signals(H, G, gram, rows_a))

        return profile

    def _scalars(self, prof: _Profile) -> dict[str, float]:
        return {
            "peak": float(prof.T_hinge.max()),
            "excess": float((prof.T - prof.T_anchor).max()),
            "raw": self._raw_score(prof.raw),
        }

    def resample_scores(self, suspect: ScarData, resamples: Sequence[np.ndarray]) -> list[dict[str, float]]:
        """Band-free scalars (``peak``, ``excess``, ``raw``) on paired prompt resamples
        (each an index array into the prompts), e.g. for AUCs over resamples."""
        from threadpoolctl import threadpool_limits

        check_is_fitted(self, "anchor_")
        n = suspect.n_prompts
        with threadpool_limits(limits=1):
            profile = self._profiler(suspect)
            out = []
            for idx in resamples:
                r = np.asarray(idx, dtype=np.int64)
                if r.size == 0 or r.min() < 0 or r.max() >= n:
                    raise InputError(f"resample indices must lie in [0, {n})", field="resamples")
                out.append(self._scalars(profile(r, r + n)))
        return out

    def _audit(self, suspect: ScarData) -> ScarResult:
        n = suspect.n_prompts
        profile = self._profiler(suspect)
        base = np.arange(n)

        obs = profile(base, base + n)
        layers = np.arange(FIRST_LAYER, FIRST_LAYER + obs.T.shape[0])
        tau_k, tau_l, tau_v = self._thresholds(obs.za)
        stat = self._stat(obs)

        gen = np.random.default_rng(self.seed)
        total = self.n_permutations + self.n_bootstrap
        sig_stat = self._signal_stats(obs)
        null = np.empty((self.n_permutations, stat.shape[0]))
        null_sig = np.empty((self.n_permutations, *sig_stat.shape))
        for i in range(self.n_permutations):
            swap = gen.integers(0, 2, size=n).astype(bool)
            rs = np.where(swap, base + n, base)
            ra = np.where(swap, base, base + n)
            prof_i = profile(rs, ra)
            null[i] = self._stat(prof_i)
            null_sig[i] = self._signal_stats(prof_i)
            if self.progress is not None and (i + 1) % _PROGRESS_EVERY == 0:
                self.progress(i + 1, total)
        # rounded to 1e-9 so that float round-off between identical rows counts as a tie
        p = permutation_pvalues(np.round(stat, 9), np.round(null, 9))
        q = bh_adjust(p)
        p_sig = np.stack(
            [permutation_pvalues(np.round(sig_stat[j], 9), np.round(null_sig[:, j], 9)) for j in range(3)]
        )
        q_sig = np.stack([bh_adjust(p_sig[j]) for j in range(3)])

        zs = obs.zs
        thresholds = {"tau_kappa": tau_k, "z_length_below": tau_l, "tau_v": tau_v}
        by_rule: dict[str, list[Band]] = {
            r: rupture_bands(
                zs,
                thresholds,
                q,
                layers,
                rule=r,
                q_signal=q_sig,
                drift=self.drift,
                min_width=self.min_width,
                q_fdr=self.q_fdr,
            )
            for r in RULES
        }
        chosen = by_rule[str(self.rule)]
        candidates = list(dict.fromkeys((b.first, b.last) for b in chosen))
        accepted = list(dict.fromkeys((b.first, b.last) for b in chosen if b.accepted))
        rupture: int | None = None
        top: tuple[int, int] | None = None
        if accepted:
            peaks = [float(obs.T[(layers >= a) & (layers <= b)].max()) for a, b in accepted]
            top = accepted[int(np.argmax(peaks))]
            sel_idx = np.flatnonzero((layers >= top[0]) & (layers <= top[1]))
            rupture = int(layers[sel_idx[int(np.argmax(obs.T[sel_idx]))]])  # argmax = left-most

        # bootstrap: paired prompt resamples, observed band fixed
        memo: dict[bytes, dict[str, float]] = {}
        done = [self.n_permutations]

        def scores_of(idx: np.ndarray) -> dict[str, float]:
            key = idx.tobytes()
            if key not in memo:
                prof = obs if np.array_equal(idx, base) else profile(idx, idx + n)
                out = self._scalars(prof)
                if top is not None:
                    sel = (layers >= top[0]) & (layers <= top[1])
                    out["scar"] = float(prof.T_hinge[sel].max())
                    out["area"] = float(prof.T_hinge[sel].mean())
                memo[key] = out
                done[0] += 1
                if self.progress is not None and done[0] % _PROGRESS_EVERY == 0:
                    self.progress(min(done[0], total), total)
            return memo[key]

        rows = base[:, None].astype(np.float64)

        def ci(name: str) -> Estimate:
            return bootstrap_ci(
                rows,
                lambda r: scores_of(r[:, 0].astype(np.int64))[name],
                n_resamples=self.n_bootstrap,
                confidence=self.confidence,
                rng=self.seed + 1,
            )

        scar = ci("scar") if top is not None else None
        area = ci("area") if top is not None else None
        raw_e, peak_e, excess_e = ci("raw"), ci("peak"), ci("excess")
        if self.progress is not None:
            self.progress(total, total)

        per_layer: dict[str, np.ndarray] = {
            **obs.raw,
            "delta_kappa": obs.raw["kappa"] - obs.raw["kappa_anchor"],
            "delta_length": obs.raw["length"] - obs.raw["length_anchor"],
            "z_kappa": zs[0],
            "z_length": zs[1],
            "z_drift": zs[2],
            "z_kappa_anchor": obs.za[0],
            "z_length_anchor": obs.za[1],
            "z_drift_anchor": obs.za[2],
            "T": obs.T,
            "T_hinge": obs.T_hinge,
            "T_anchor": obs.T_anchor,
            "stat": stat,
            "p": p,
            "q": q,
            **{f"stat_{name}": sig_stat[j] for j, name in enumerate(SIGNALS)},
            **{f"p_{name}": p_sig[j] for j, name in enumerate(SIGNALS)},
            **{f"q_{name}": q_sig[j] for j, name in enumerate(SIGNALS)},
        }
        settings = {
            **{k: v for k, v in self.get_params().items() if k != "progress"},
            "k_used": self.k_,
            "weights": list(self.weights),
            "percentiles": list(self.percentiles),
            "n_prompts": n,
            "n_layers": suspect.n_layers,
            "permutation_statistic": "T - T_anchor" if self.reference == "within" else "T(anchor deltas)",
            "per_signal_statistic": "z_s - z_anchor (kappa, -length, drift)"
            if self.reference == "within"
            else "z of the deltas (kappa, -length, drift)",
            "permutation_scheme": "paired swap of each prompt's suspect/anchor rows, p=(1+#>=)/(1+B)",
            "bootstrap": "paired prompt resamples, observed band fixed, percentile CI",
            "layer_convention": "layer l = output of block l (residual stream, pre final norm), l=2..N-1",
            "mad": "plain MAD (no 1.4826 factor)",
        }
        return ScarResult(
            layers=layers,
            per_layer={k: np.asarray(v, dtype=np.float64) for k, v in per_layer.items()},
            bands=accepted,
            candidate_bands=candidates,
            rupture_layer=rupture,
            scar=scar,
            scar_area=area,
            scar_raw=raw_e,
            peak=peak_e,
            excess=excess_e,
            thresholds=thresholds,
            weights=tuple(float(w) for w in self.weights),  # type: ignore[arg-type]
            settings=settings,
            bands_by_rule=by_rule,
        )


def calibrate_weights(
    profiles: Sequence[np.ndarray], labels: Sequence[int], *, C: float = 1.0, seed: int = 0
) -> tuple[float, float, float]:
    """Learn ``(alpha, beta, gamma)`` by logistic regression on development models.

    Each profile is a ``[3 layer]`` array of ``(z_kappa, z_L, z_v)`` of one dev model, labelled
    1 (contaminated) or 0 (clean); every layer is one row with features ``(z_kappa, -z_L, z_v)``
    and its model's label. The coefficients are returned rescaled to sum of absolute values 3
    (the scale of the default ``(1, 1, 1)``), so ``T`` stays comparable.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> clean = [rng.normal(size=(3, 20)) for _ in range(3)]
        >>> dirty = [rng.normal(size=(3, 20)) + np.array([[2.0], [0.0], [0.0]]) for _ in range(3)]
        >>> w = calibrate_weights(clean + dirty, [0, 0, 0, 1, 1, 1])
        >>> w[0] > abs(w[1]) and w[0] > abs(w[2])
        True
    """
    from sklearn.linear_model import LogisticRegression

    if len(profiles) != len(labels) or len(profiles) < 2:
        raise InputError("calibrate_weights needs one label per profile and at least two profiles")
    ys = {int(y) for y in labels}
    if ys != {0, 1}:
        raise InputError(
            f"calibration needs clean (0) and contaminated (1) dev models, got labels {sorted(ys)}"
        )
    X_rows, y_rows = [], []
    for prof, y in zip(profiles, labels, strict=True):
        z = np.asarray(prof, dtype=np.float64)
        if z.ndim != 2 or z.shape[0] != 3:
            raise InputError(f"each profile must be [3 layer], got {z.shape}")
        X_rows.append(np.stack([z[0], -z[1], z[2]], axis=1))
        y_rows.append(np.full(z.shape[1], int(y)))
    X = np.concatenate(X_rows)
    yv = np.concatenate(y_rows)
    clf = LogisticRegression(C=C, random_state=seed, max_iter=1000).fit(X, yv)
    coef = clf.coef_[0]
    scale = np.abs(coef).sum()
    if scale == 0:
        return (1.0, 1.0, 1.0)
    w = 3.0 * coef / scale
    return (float(w[0]), float(w[1]), float(w[2]))
