"""SCAR's data types: the input of one model on a battery, a band, the result of an audit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from mnemoscope.errors import InputError
from mnemoscope.stats import Estimate

__all__ = [
    "FIRST_LAYER",
    "RULES",
    "SIGNALS",
    "Band",
    "Reference",
    "Rule",
    "ScarData",
    "ScarResult",
    "result_summary",
]

Reference = Literal["within", "anchor_delta"]
Rule = Literal["paper", "any2", "per_signal"]
RULES: tuple[Rule, ...] = ("paper", "any2", "per_signal")
SIGNALS: tuple[str, str, str] = ("kappa", "length", "drift")
FIRST_LAYER = 2


@dataclass(frozen=True)
class ScarData:
    """Per-prompt hidden states (and gradients) of one model on a prompt battery.

    Attributes:
        hidden: ``[prompt state d_model]`` residual stream (state 0 = embeddings, state ``l`` =
            output of block ``l``, before the final norm) at the chosen token representation.
        grad: ``[prompt state d_model]`` d log p(target | prompt) / d h, or ``None``.
        ids: prompt ids, in row order (suspect and anchor must match).
        model: identity of the model (``ModelInfo.to_dict()`` or any dict).
        n_prompt_tokens, n_target_tokens: ``[prompt]`` token counts (optional).
        logp: ``[prompt]`` log p(target | prompt) (optional).
    """

    hidden: np.ndarray
    grad: np.ndarray | None
    ids: tuple[str, ...]
    model: dict[str, Any] = field(default_factory=dict)
    n_prompt_tokens: np.ndarray | None = None
    n_target_tokens: np.ndarray | None = None
    logp: np.ndarray | None = None

    def __post_init__(self) -> None:
        h = np.asarray(self.hidden)
        if h.ndim != 3:
            raise InputError(f"hidden must be [prompt state d_model], got shape {h.shape}", field="hidden")
        if h.shape[1] < 5:
            raise InputError(
                f"SCAR needs at least 4 layers (5 states), got {h.shape[1]} states", field="hidden"
            )
        if len(self.ids) != h.shape[0]:
            raise InputError(f"{len(self.ids)} ids for {h.shape[0]} rows of hidden states", field="ids")
        if self.grad is not None and np.asarray(self.grad).shape != h.shape:
            raise InputError(
                f"grad shape {np.asarray(self.grad).shape} differs from hidden {h.shape}", field="grad"
            )
        if not np.isfinite(h).all():
            raise InputError("hidden states contain NaN or inf", field="hidden")
        if self.grad is not None and not np.isfinite(self.grad).all():
            raise InputError("gradients contain NaN or inf", field="grad")

    @property
    def n_prompts(self) -> int:
        return int(self.hidden.shape[0])

    @property
    def n_layers(self) -> int:
        """Number of blocks (states - 1)."""
        return int(self.hidden.shape[1] - 1)


@dataclass(frozen=True)
class Band:
    """A run of layers meeting a band rule's conditions.

    ``signals`` names the conditions that define the run (``paper``: all three, or two without
    drift; ``any2``: every condition that holds on some layer of the run; ``per_signal``: the one
    signal). ``min_q`` is the smallest BH q-value in the run of the test the rule uses (the
    composite ``T`` test, or the signal's own test for ``per_signal``); ``accepted`` = width >=
    ``min_width`` and ``min_q <= q_fdr``.
    """

    first: int
    last: int
    signals: tuple[str, ...]
    min_q: float
    accepted: bool

    @property
    def width(self) -> int:
        return self.last - self.first + 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "first": self.first,
            "last": self.last,
            "width": self.width,
            "signals": list(self.signals),
            "min_q": self.min_q,
            "accepted": self.accepted,
        }


@dataclass(frozen=True, eq=False)
class ScarResult:
    """Outcome of one suspect-vs-anchor audit.

    ``per_layer`` maps names to ``[layer]`` arrays over ``layers`` (block indices ``2..N-1``):
    raw signals of suspect and anchor (``kappa``, ``length``, ``drift``, ``*_anchor``), the
    anchor-relative deltas (``delta_*``, ``drift_delta`` = ``||v - v_anchor||``), suspect and
    anchor z-scores, ``T`` (signed), ``T_hinge``, ``T_anchor``, the permutation statistic
    ``stat``, ``p`` and BH ``q``. Scores are :class:`~mnemoscope.stats.Estimate` (``None`` when
    not measured, e.g. ``scar`` without an accepted band).
    """

    layers: np.ndarray
    per_layer: dict[str, np.ndarray]
    bands: list[tuple[int, int]]
    candidate_bands: list[tuple[int, int]]
    rupture_layer: int | None
    scar: Estimate | None
    scar_area: Estimate | None
    scar_raw: Estimate
    peak: Estimate
    excess: Estimate
    thresholds: dict[str, float]
    weights: tuple[float, float, float]
    settings: dict[str, Any]
    bands_by_rule: dict[str, list[Band]] = field(default_factory=dict)

    @property
    def detected(self) -> bool:
        return bool(self.bands)

    def band_layers(self) -> set[int]:
        """All layers inside accepted bands (for Jaccard comparisons)."""
        return {ell for a, b in self.bands for ell in range(a, b + 1)}

    def to_dict(self) -> dict[str, Any]:
        def est(e: Estimate | None) -> dict[str, Any] | None:
            return None if e is None else e.to_dict()

        return {
            "bands": [[int(a), int(b)] for a, b in self.bands],
            "candidate_bands": [[int(a), int(b)] for a, b in self.candidate_bands],
            "rupture_layer": self.rupture_layer,
            "scar_score": None if self.scar is None else self.scar.estimate,
            "scar_score_ci": None if self.scar is None else [self.scar.ci_low, self.scar.ci_high],
            "scar_area": None if self.scar_area is None else self.scar_area.estimate,
            "scar_area_ci": None
            if self.scar_area is None
            else [self.scar_area.ci_low, self.scar_area.ci_high],
            "scar_raw": self.scar_raw.estimate,
            "scar_raw_ci": [self.scar_raw.ci_low, self.scar_raw.ci_high],
            "peak": self.peak.estimate,
            "peak_ci": [self.peak.ci_low, self.peak.ci_high],
            "excess": self.excess.estimate,
            "excess_ci": [self.excess.ci_low, self.excess.ci_high],
            "scores": {
                "scar": est(self.scar),
                "scar_area": est(self.scar_area),
                "scar_raw": est(self.scar_raw),
                "peak": est(self.peak),
                "excess": est(self.excess),
            },
            "rule": self.settings.get("rule", "paper"),
            "bands_by_rule": {r: [b.to_dict() for b in bs] for r, bs in self.bands_by_rule.items()},
            "thresholds": dict(self.thresholds),
            "weights": list(self.weights),
            "layers": [int(x) for x in self.layers],
            "per_layer": {k: [float(x) for x in v] for k, v in self.per_layer.items()},
            "settings": dict(self.settings),
        }


def result_summary(result: ScarResult) -> dict[str, Any]:
    """The headline numbers of a result (for logs and tables)."""
    d = result.to_dict()
    return {k: d[k] for k in ("bands", "rupture_layer", "scar_score", "scar_score_ci", "peak", "peak_ci")}
