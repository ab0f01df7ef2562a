"""SCAR's band rules: which runs of layers count as a rupture band (``paper``, ``any2``, ``per_signal``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from mnemoscope.detectors.scar.types import RULES, SIGNALS, Band, Rule, ScarResult
from mnemoscope.errors import InputError

__all__ = ["band_conditions", "contiguous_runs", "result_bands", "rupture_bands"]


def contiguous_runs(
    mask: Sequence[bool] | np.ndarray, layers: Sequence[int] | np.ndarray
) -> list[tuple[int, int]]:
    """Maximal runs of consecutive ``True`` as ``(first_layer, last_layer)``.

    Example:
        >>> contiguous_runs([False, True, True, False, True], [1, 2, 3, 4, 5])
        [(2, 3), (5, 5)]
    """
    runs: list[tuple[int, int]] = []
    start: int | None = None
    lay = list(layers)
    for i, m in enumerate(mask):
        if m and start is None:
            start = i
        if not m and start is not None:
            runs.append((int(lay[start]), int(lay[i - 1])))
            start = None
    if start is not None:
        runs.append((int(lay[start]), int(lay[len(lay) - 1])))
    return runs


def band_conditions(z: np.ndarray, thresholds: dict[str, float], *, drift: bool = True) -> np.ndarray:
    """``[3 layer]`` booleans: kappa spike ``z_kappa > tau_kappa``, length dip ``z_L <
    z_length_below``, drift surge ``z_v > tau_v`` (all ``False`` without drift)."""
    z = np.asarray(z, dtype=np.float64)
    if z.ndim != 2 or z.shape[0] != 3:
        raise InputError(f"z must be [3 layer] (kappa, length, drift), got shape {z.shape}", field="z")
    missing = {"tau_kappa", "z_length_below", "tau_v"} - set(thresholds)
    if missing:
        raise InputError(f"thresholds lack {sorted(missing)}", field="thresholds")
    cond = np.stack(
        [
            z[0] > thresholds["tau_kappa"],
            z[1] < thresholds["z_length_below"],
            z[2] > thresholds["tau_v"],
        ]
    )
    if not drift:
        cond[2] = False
    return cond


def rupture_bands(
    z: np.ndarray,
    thresholds: dict[str, float],
    q: np.ndarray,
    layers: Sequence[int] | np.ndarray,
    *,
    rule: Rule = "paper",
    q_signal: np.ndarray | None = None,
    drift: bool = True,
    min_width: int = 2,
    q_fdr: float = 0.05,
) -> list[Band]:
    """All candidate bands of one audit under a band rule (accepted or not, in layer order).

    Args:
        z: ``[3 layer]`` suspect z-scores ``(z_kappa, z_L, z_v)``.
        thresholds: ``tau_kappa``, ``z_length_below``, ``tau_v`` (from the anchor).
        q: ``[layer]`` BH q-values of the composite permutation test.
        layers: layer indices.
        rule: ``"paper"`` (all conditions on every layer: the paper's rule, two conditions
            without drift), ``"any2"`` (at least two of the conditions on every layer; without
            drift the same as ``"paper"``), ``"per_signal"`` (each signal's condition alone,
            accepted on that signal's own q-values ``q_signal``).
        q_signal: ``[3 layer]`` BH q-values of the per-signal permutation tests (``per_signal``).

    Example:
        >>> z = np.array([[0, 3, 3, 0], [0, -3, -3, 0], [0, 3, 0, 0]], dtype=float)
        >>> th = {"tau_kappa": 1.0, "z_length_below": -1.0, "tau_v": 1.0}
        >>> q = np.array([1, 0.01, 0.01, 1])
        >>> [(b.first, b.last) for b in rupture_bands(z, th, q, [2, 3, 4, 5])]
        [(3, 3)]
        >>> [(b.first, b.last, b.accepted) for b in rupture_bands(z, th, q, [2, 3, 4, 5], rule="any2")]
        [(3, 4, True)]
    """
    if rule not in RULES:
        raise InputError(f"rule must be one of {', '.join(RULES)}; got {rule!r}", field="rule")
    lay = np.asarray(layers, dtype=np.int64)
    cond = band_conditions(z, thresholds, drift=drift)
    q = np.asarray(q, dtype=np.float64)
    if q.shape != lay.shape or cond.shape[1] != lay.shape[0]:
        raise InputError(
            f"z ({cond.shape[1]} layers), q ({q.shape[0]}) and layers ({lay.shape[0]}) must align", field="q"
        )
    n_sig = 3 if drift else 2

    def make(mask: np.ndarray, qv: np.ndarray, names: Callable[[np.ndarray], tuple[str, ...]]) -> list[Band]:
        out = []
        for a, b in contiguous_runs(mask, lay):
            sel = (lay >= a) & (lay <= b)
            mq = float(qv[sel].min())
            out.append(Band(a, b, names(sel), mq, bool(b - a + 1 >= min_width and mq <= q_fdr)))
        return out

    if rule == "paper":
        return make(np.asarray(cond[:n_sig].all(axis=0)), q, lambda _: SIGNALS[:n_sig])
    if rule == "any2":
        return make(
            np.asarray(cond[:n_sig].sum(axis=0) >= 2),
            q,
            lambda sel: tuple(SIGNALS[i] for i in range(n_sig) if cond[i, sel].any()),
        )
    if q_signal is None:
        raise InputError("rule 'per_signal' needs the per-signal q-values (q_signal)", field="q_signal")
    qs = np.asarray(q_signal, dtype=np.float64)
    if qs.shape != (3, lay.shape[0]):
        raise InputError(f"q_signal must be [3 layer], got shape {qs.shape}", field="q_signal")
    bands: list[Band] = []
    for i in range(n_sig):
        bands += make(cond[i], qs[i], lambda _, i=i: (SIGNALS[i],))  # type: ignore[misc]
    return sorted(bands, key=lambda b: (b.first, b.last, SIGNALS.index(b.signals[0])))


def result_bands(result: ScarResult, rule: Rule = "paper") -> list[Band]:
    """:func:`rupture_bands` of a finished audit under any rule (no resampling is repeated)."""
    pl, st = result.per_layer, result.settings
    z = np.stack([pl["z_kappa"], pl["z_length"], pl["z_drift"]])
    q_signal = np.stack([pl["q_kappa"], pl["q_length"], pl["q_drift"]]) if "q_kappa" in pl else None
    return rupture_bands(
        z,
        result.thresholds,
        pl["q"],
        result.layers,
        rule=rule,
        q_signal=q_signal,
        drift=bool(st.get("drift", True)),
        min_width=int(st.get("min_width", 2)),
        q_fdr=float(st.get("q_fdr", 0.05)),
    )
