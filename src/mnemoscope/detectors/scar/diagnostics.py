"""SCAR diagnostics: per-prompt drift / length evidence of a suspect against its anchor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mnemoscope.detectors.scar.types import FIRST_LAYER, ScarData
from mnemoscope.errors import InputError

__all__ = ["PerPromptScores", "per_prompt_scores"]


@dataclass(frozen=True)
class PerPromptScores:
    """Per-prompt SCAR-type evidence of a suspect and an anchor on the same prompts.

    Curvature has no per-prompt value (it is a property of the spectrum of a set of prompts),
    so the per-prompt score uses the two signals that decompose over prompts:

    * ``drift``: mean over layers ``2..N-1`` of ``||g_i(l)||``, the norm of prompt ``i``'s own
      gradient of ``log p(target | prompt)`` (``v(l)`` is the mean of these vectors);
    * ``length``: sum over the same steps ``l -> l+1`` of ``sqrt(d_i^T G_l d_i)``,
      ``d_i = h_i(l+1) - h_i(l)``, with ``G_l`` the inverse Ledoit-Wolf covariance of the
      pooled suspect and anchor rows at state ``l`` (one metric for both models);
    * ``score = z(drift) - z(length)``, z = robust z against the *anchor's* prompts (median,
      plain MAD): the paper's direction (drift surge, effort dip) fixed in advance.

    ``summary()`` gives, for each, the AUC of suspect rows (label 1) against anchor rows
    (label 0) and the paired fraction of prompts where the suspect's value is higher.
    """

    ids: tuple[str, ...]
    drift_suspect: np.ndarray
    drift_anchor: np.ndarray
    length_suspect: np.ndarray
    length_anchor: np.ndarray
    score_suspect: np.ndarray
    score_anchor: np.ndarray

    def auc(self, name: str) -> float | None:
        from mnemoscope.stats import roc_auc

        s, a = getattr(self, f"{name}_suspect"), getattr(self, f"{name}_anchor")
        return roc_auc(np.concatenate([s, a]), np.concatenate([np.ones(len(s)), np.zeros(len(a))]))

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"n_prompts": len(self.ids)}
        for name in ("drift", "length", "score"):
            s, a = getattr(self, f"{name}_suspect"), getattr(self, f"{name}_anchor")
            out[name] = {
                "auc_suspect_vs_anchor": self.auc(name),
                "paired_fraction_suspect_higher": float(np.mean(s > a)),
                "mean_suspect": float(np.mean(s)),
                "mean_anchor": float(np.mean(a)),
            }
        return out


def _robust_against(x: np.ndarray, ref: np.ndarray) -> np.ndarray:
    med = float(np.median(ref))
    mad = float(np.median(np.abs(ref - med)))
    if mad == 0:
        mad = float(np.mean(np.abs(ref - med))) or 1.0
    return (x - med) / mad


def per_prompt_scores(
    suspect: ScarData, anchor: ScarData, *, first_layer: int = FIRST_LAYER
) -> PerPromptScores:
    """Per-prompt drift, length and score of both models (see :class:`PerPromptScores`).

    Example:
        >>> rng = np.random.default_rng(0)
        >>> H = rng.normal(size=(20, 6, 8)); G = rng.normal(size=(20, 6, 8))
        >>> ids = tuple(str(i) for i in range(20))
        >>> pp = per_prompt_scores(ScarData(H, G * 3, ids), ScarData(H, G, ids))
        >>> pp.auc("drift") > 0.9, pp.auc("length")
        (True, 0.5)
    """
    from sklearn.covariance import LedoitWolf

    if suspect.ids != anchor.ids or suspect.hidden.shape != anchor.hidden.shape:
        raise InputError("per-prompt scores need suspect and anchor traced on the same prompts", field="id")
    if suspect.grad is None or anchor.grad is None:
        raise InputError(
            "per-prompt scores need gradients of both models (prompts need targets)", field="target"
        )
    Hs, Ha = np.asarray(suspect.hidden, np.float64), np.asarray(anchor.hidden, np.float64)
    n_states = Hs.shape[1]
    last = n_states - 2  # layers first_layer..N-1 (state N is only a neighbour)
    if not 1 <= first_layer <= last:
        raise InputError(f"first_layer must be in [1, {last}], got {first_layer}", field="first_layer")
    steps = range(first_layer, last + 1)
    Ls, La = np.zeros(Hs.shape[0]), np.zeros(Hs.shape[0])
    for ell in steps:
        pooled = np.concatenate([Hs[:, ell], Ha[:, ell]])
        prec = LedoitWolf().fit(pooled).precision_
        for H, acc in ((Hs, Ls), (Ha, La)):
            d = H[:, ell + 1] - H[:, ell]
            acc += np.sqrt(np.maximum(np.einsum("id,de,ie->i", d, prec, d), 0.0))
    Gs, Ga = np.asarray(suspect.grad, np.float64), np.asarray(anchor.grad, np.float64)
    Ds = np.linalg.norm(Gs[:, first_layer : last + 1], axis=-1).mean(axis=1)
    Da = np.linalg.norm(Ga[:, first_layer : last + 1], axis=-1).mean(axis=1)

    def score(d: np.ndarray, length: np.ndarray) -> np.ndarray:
        return _robust_against(d, Da) - _robust_against(length, La)

    return PerPromptScores(
        ids=suspect.ids,
        drift_suspect=Ds,
        drift_anchor=Da,
        length_suspect=Ls,
        length_anchor=La,
        score_suspect=score(Ds, Ls),
        score_anchor=score(Da, La),
    )
