"""RADAR's 37 features (Kattamuri et al. 2025, Appendix D) from one captured forward pass.

Pure functions of a :class:`~mnemoscope.trace.interventions.RadarTrace`: the logit-lens
trajectory (confidence ``c_l`` and entropy ``H_l`` at the last prompt token for layers
``l = 1..L``), the attention weights ``[L H S S]``, the residual stream ``[L+1 S d]`` and,
for the ``"measured"`` feature set, causal effects measured with interventions.

Two feature sets share the same 37 names in Appendix D order (:data:`FEATURE_NAMES`):

* ``"paper"``: every feature as Appendix D defines it, proxies and constants included
  (``effective_circuit_depth = causal_path_length = L``; the "causal" features are functions
  of the attention entropy; ``critical_component_count = max(1, N_spec)``).
* ``"measured"``: the ten causal features of :data:`CAUSAL_FEATURES` are computed from real
  interventions (zero-ablation of each layer's attention output or each head, removal of an
  attention output from the final residual stream, last-token state patching from a
  noise-corrupted prompt); the 27 others are identical to ``"paper"``.

Choices the paper leaves open (all documented in ``docs/radar.md``):

* Layers: ``l = 1..L`` are the block outputs (the embeddings are not a layer); the
  ``convergence_layer`` ``l*`` is a **0-based** index into that trajectory, so that
  ``convergence_speed = 1 / (l* + 1)`` is 1 when the first block already peaks.
* Sample standard deviations (``ddof = 1``) where the paper writes ``1 / (L - 1)``; a
  one-layer trajectory has standard deviation 0. Population standard deviations
  (``ddof = 0``) for ``sigma_causal``, which the paper does not define.
* ``oscillation_count``: zero derivatives are dropped before counting sign changes
  (``+, 0, -`` counts one change).
* Per-head attention entropy ``H_{l,h}`` (nats): ``"row_mean"`` (default) averages each
  query row's entropy ``-sum_j A_ij log A_ij`` over the query rows; ``"sum"`` is the paper's
  literal double sum over ``i, j``, which grows with the prompt length, so the fixed
  threshold 1.5 then counts almost no head on long prompts.
* Working memory uses every prompt position: ``v_l`` = variance of all entries of the layer-l
  states ``[S d]``, ``n_l`` = mean L2 norm of a position's state; hidden_state_variance =
  mean ``v_l``, norm_growth_trajectory = ``n_L / n_0``, variance growth = ``v_L / v_0``,
  activation_flow_variance = variance of ``n_l`` over layers, state_rank_evolution =
  effective rank (Roy & Vetterli 2007) of the layer-L states minus that of the embeddings;
  working_memory_complexity = state_rank_evolution (the paper's stated proxy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from mnemoscope.errors import InputError

if TYPE_CHECKING:
    from mnemoscope.trace.interventions import CausalEffects, RadarTrace

__all__ = [
    "CAUSAL_FEATURES",
    "FEATURE_NAMES",
    "MECHANISTIC_FEATURES",
    "SURFACE_FEATURES",
    "AttentionEntropy",
    "FeatureSet",
    "RadarFeatureConfig",
    "attention_features",
    "effective_rank",
    "head_entropies",
    "measured_causal_features",
    "paper_causal_features",
    "radar_features",
    "surface_features",
    "working_memory_features",
]

FeatureSet = Literal["paper", "measured"]
AttentionEntropy = Literal["row_mean", "sum"]

SURFACE_FEATURES: tuple[str, ...] = (
    "mean_confidence",
    "std_confidence",
    "max_confidence",
    "min_confidence",
    "confidence_range",
    "convergence_layer",
    "convergence_speed",
    "confidence_slope",
    "oscillation_count",
    "early_confidence",
    "late_confidence",
    "prediction_stability",
    "mean_entropy",
    "entropy_change",
    "information_gain",
    "layer_consistency",
)
MECHANISTIC_FEATURES: tuple[str, ...] = (
    "num_specialized_heads",
    "head_specialization_score",
    "factual_head_activation",
    "reasoning_head_activation",
    "attention_entropy",
    "effective_circuit_depth",
    "circuit_complexity",
    "activation_flow_variance",
    "causal_path_length",
    "ablation_robustness",
    "critical_component_count",
    "performance_degradation_slope",
    "intervention_sensitivity",
    "hidden_state_variance",
    "norm_growth_trajectory",
    "working_memory_complexity",
    "state_rank_evolution",
    "direct_logit_attribution",
    "indirect_effect_strength",
    "causal_mediation_score",
    "activation_patching_effect",
)
#: The 37 features in Appendix D order (16 surface, then 21 mechanistic).
FEATURE_NAMES: tuple[str, ...] = SURFACE_FEATURES + MECHANISTIC_FEATURES
#: Features that the "measured" set computes from interventions instead of proxies.
CAUSAL_FEATURES: tuple[str, ...] = (
    "effective_circuit_depth",
    "causal_path_length",
    "ablation_robustness",
    "critical_component_count",
    "performance_degradation_slope",
    "intervention_sensitivity",
    "direct_logit_attribution",
    "indirect_effect_strength",
    "causal_mediation_score",
    "activation_patching_effect",
)

_EPS = 1e-8


@dataclass(frozen=True)
class RadarFeatureConfig:
    """How features are computed from a trace (recorded with every features file and model).

    Attributes:
        feature_set: ``"paper"`` (Appendix D, proxies included) or ``"measured"``.
        attention_entropy: per-head entropy normalisation (see the module doc).
        specialization_threshold: ``tau`` of ``N_spec`` (paper: 1.5 nats).
        effect_threshold: nats of top-token log-probability drop above which a component
            (head/layer ablation) or a patched layer counts as critical (measured set only).
    """

    feature_set: FeatureSet = "paper"
    attention_entropy: AttentionEntropy = "row_mean"
    specialization_threshold: float = 1.5
    effect_threshold: float = 0.1

    def __post_init__(self) -> None:
        if self.feature_set not in ("paper", "measured"):
            raise InputError(f"feature_set must be 'paper' or 'measured', got {self.feature_set!r}")
        if self.attention_entropy not in ("row_mean", "sum"):
            raise InputError(f"attention_entropy must be 'row_mean' or 'sum', got {self.attention_entropy!r}")

    def to_dict(self) -> dict[str, object]:
        return {
            "feature_set": self.feature_set,
            "attention_entropy": self.attention_entropy,
            "specialization_threshold": self.specialization_threshold,
            "effect_threshold": self.effect_threshold,
        }


# --------------------------------------------------------------------------- helpers


def _std(x: np.ndarray, ddof: int = 1) -> float:
    return float(np.std(x, ddof=ddof)) if x.size > ddof else 0.0


def _oscillations(c: np.ndarray) -> int:
    d = np.diff(c)
    d = d[d != 0]
    return int(np.sum(d[:-1] * d[1:] < 0)) if d.size > 1 else 0


def effective_rank(m: np.ndarray) -> float:
    """Effective rank (Roy & Vetterli 2007): ``exp`` of the entropy of the normalised singular values.

    >>> round(effective_rank(np.eye(4)), 6)
    4.0
    >>> effective_rank(np.zeros((3, 2)))
    0.0
    """
    s = np.linalg.svd(np.asarray(m, dtype=np.float64), compute_uv=False)
    total = s.sum()
    if total <= 0:
        return 0.0
    p = s[s > 0] / total
    return float(np.exp(-(p * np.log(p)).sum()))


# --------------------------------------------------------------------------- surface


def surface_features(confidence: np.ndarray, entropy: np.ndarray) -> dict[str, float]:
    """The 16 surface features of a logit-lens trajectory (Appendix D.1).

    Args:
        confidence: ``[L]`` max softmax probability ``c_l`` at layers ``1..L``.
        entropy: ``[L]`` entropy ``H_l`` (nats) of the same distributions.

    Example:
        >>> f = surface_features(np.array([0.1, 0.3, 0.2, 0.6]), np.array([4.0, 3.0, 3.5, 1.0]))
        >>> f["convergence_layer"], f["convergence_speed"], f["oscillation_count"], f["information_gain"]
        (3.0, 0.25, 2.0, 3.0)
    """
    c = np.asarray(confidence, dtype=np.float64)
    h = np.asarray(entropy, dtype=np.float64)
    if c.ndim != 1 or c.size == 0 or c.shape != h.shape:
        raise InputError(f"confidence and entropy must be 1-D of equal length >= 1, got {c.shape}, {h.shape}")
    n = c.size
    layers = np.arange(1, n + 1, dtype=np.float64)
    lc = layers - layers.mean()
    slope = float((lc * (c - c.mean())).sum() / (lc**2).sum()) if n > 1 else 0.0
    l_star = int(np.argmax(c))
    half = n // 2
    std_c = _std(c)
    return {
        "mean_confidence": float(c.mean()),
        "std_confidence": std_c,
        "max_confidence": float(c.max()),
        "min_confidence": float(c.min()),
        "confidence_range": float(c.max() - c.min()),
        "convergence_layer": float(l_star),
        "convergence_speed": 1.0 / (l_star + 1),
        "confidence_slope": slope,
        "oscillation_count": float(_oscillations(c)),
        "early_confidence": float(c[:half].mean()) if half else float(c[0]),
        "late_confidence": float(c[half:].mean()),
        "prediction_stability": 1.0 - std_c,
        "mean_entropy": float(h.mean()),
        "entropy_change": float(h[-1] - h[0]),
        "information_gain": float(h[0] - h[-1]),
        "layer_consistency": 1.0 - _std(h),
    }


# --------------------------------------------------------------------------- attention


def head_entropies(attentions: np.ndarray, mode: AttentionEntropy = "row_mean") -> np.ndarray:
    """``[L H]`` per-head attention entropy (nats) of ``[L H S S]`` attention weights.

    ``"row_mean"``: mean over query rows ``i`` of ``-sum_j A_ij log A_ij``; ``"sum"``: the
    paper's literal ``-sum_{i,j} A_ij log A_ij``. ``0 log 0 = 0``.

    Example:
        >>> a = np.zeros((1, 1, 2, 2)); a[0, 0, 0, 0] = 1.0; a[0, 0, 1] = [0.5, 0.5]
        >>> round(float(head_entropies(a, "row_mean")[0, 0]), 6), round(float(head_entropies(a, "sum")[0, 0]), 6)
        (0.346574, 0.693147)
    """
    if attentions is None:
        raise InputError("RADAR needs attention weights, and this trace has none", field="attentions")
    a = np.asarray(attentions, dtype=np.float64)
    if a.ndim != 4 or a.shape[-1] != a.shape[-2] or a.shape[-1] == 0:
        raise InputError(f"attentions must be [layer head seq seq], got shape {a.shape}", field="attentions")
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(a > 0, a * np.log(np.where(a > 0, a, 1.0)), 0.0)
    rows = -plogp.sum(-1)  # [L H S]
    if mode == "row_mean":
        return np.asarray(rows.mean(-1))
    if mode == "sum":
        return np.asarray(rows.sum(-1))
    raise InputError(f"unknown attention entropy mode {mode!r}; choose 'row_mean' or 'sum'")


def attention_features(head_entropy: np.ndarray, threshold: float = 1.5) -> dict[str, float]:
    """The five attention-specialisation features (Appendix D.2.1) of ``[L H]`` entropies.

    >>> f = attention_features(np.array([[0.5, 3.0], [1.0, 1.5]]))
    >>> f["num_specialized_heads"], f["attention_entropy"], f["head_specialization_score"]
    (2.0, 1.5, 0.5)
    """
    he = np.asarray(head_entropy, dtype=np.float64)
    hbar = float(he.mean())
    return {
        "num_specialized_heads": float(np.sum(he < threshold)),
        "head_specialization_score": 1.0 - hbar / 3.0,
        "factual_head_activation": 1.0 / (hbar + _EPS),
        "reasoning_head_activation": hbar / 3.0,
        "attention_entropy": hbar,
    }


# --------------------------------------------------------------------------- working memory


def working_memory_features(states: np.ndarray) -> dict[str, float]:
    """Hidden-state features from the residual stream ``[L+1 S d]`` (row 0 = embeddings).

    Returns hidden_state_variance, norm_growth_trajectory, working_memory_complexity,
    state_rank_evolution, activation_flow_variance and circuit_complexity
    (= variance growth ``v_L / v_0`` x norm growth ``n_L / n_0``); see the module doc.
    """
    s = np.asarray(states, dtype=np.float64)
    if s.ndim != 3 or s.shape[0] < 2 or s.shape[1] == 0:
        raise InputError(
            f"states must be [layer seq d] with >= 2 layers, got shape {s.shape}", field="states"
        )
    v = s.reshape(s.shape[0], -1).var(axis=1)
    n = np.linalg.norm(s, axis=-1).mean(axis=1)
    var_growth = float(v[-1] / (v[0] + _EPS))
    norm_growth = float(n[-1] / (n[0] + _EPS))
    rank_evolution = effective_rank(s[-1]) - effective_rank(s[0])
    return {
        "hidden_state_variance": float(v.mean()),
        "norm_growth_trajectory": norm_growth,
        "working_memory_complexity": rank_evolution,
        "state_rank_evolution": rank_evolution,
        "activation_flow_variance": float(n.var()),
        "circuit_complexity": var_growth * norm_growth,
    }


# --------------------------------------------------------------------------- causal


def paper_causal_features(head_entropy: np.ndarray, threshold: float = 1.5) -> dict[str, float]:
    """The ten causal features exactly as Appendix D defines them (proxies and constants).

    ``sigma_causal`` is the (population) standard deviation over layers of the per-layer
    proxy effects ``H_attn,l / 10``.

    >>> f = paper_causal_features(np.array([[1.0, 1.0], [3.0, 3.0]]))
    >>> f["effective_circuit_depth"], round(f["direct_logit_attribution"], 6), round(f["indirect_effect_strength"], 6)
    (2.0, 0.2, 0.1)
    """
    he = np.asarray(head_entropy, dtype=np.float64)
    n_layers = he.shape[0]
    hbar = float(he.mean())
    per_layer = he.mean(axis=1) / 10.0
    sigma_causal = _std(per_layer, ddof=0)
    e_direct = float(per_layer.mean())
    robustness = 1.0 - hbar / 5.0
    return {
        "effective_circuit_depth": float(n_layers),
        "causal_path_length": float(n_layers),
        "ablation_robustness": robustness,
        "critical_component_count": float(max(1, int(np.sum(he < threshold)))),
        "performance_degradation_slope": sigma_causal,
        "intervention_sensitivity": 1.0 - robustness,
        "direct_logit_attribution": e_direct,
        "indirect_effect_strength": sigma_causal,
        "causal_mediation_score": e_direct * sigma_causal,
        "activation_patching_effect": e_direct,
    }


def measured_causal_features(effects: CausalEffects, threshold: float = 0.1) -> dict[str, float]:
    """The ten causal features from measured interventions (all effects in nats of top-token log-prob drop).

    * per-layer total effect ``a_l``: zero-ablating layer l's attention output (``unit="layer"``),
      or the sum of its heads' single-head effects (``unit="head"``, additive approximation);
      components = layers or heads;
    * effective_circuit_depth = layers with ``max`` component effect ``> threshold``;
    * causal_path_length = layers whose last-token patching effect ``> threshold``;
    * ablation_robustness = mean over components of ``exp(-max(a_c, 0))`` (the fraction of
      the top-token probability kept, capped at 1); intervention_sensitivity = 1 - that;
    * critical_component_count = components with ``a_c > threshold``;
    * performance_degradation_slope = population std over layers of ``a_l`` (``sigma_causal``);
    * direct_logit_attribution = mean over layers of the direct effect (removing the layer's
      attention output from the final residual stream only);
    * indirect_effect_strength = mean over layers of ``a_l - direct_l`` (the mediated part);
    * causal_mediation_score = direct x indirect (the paper's product);
    * activation_patching_effect = mean over layers of the patching effect.
    """
    abl = np.asarray(effects.ablation, dtype=np.float64)
    per_layer_max = abl if abl.ndim == 1 else abl.max(axis=1)
    per_layer_total = abl if abl.ndim == 1 else abl.sum(axis=1)
    comps = abl.ravel()
    direct = np.asarray(effects.direct, dtype=np.float64)
    patch = np.asarray(effects.patching, dtype=np.float64)
    robustness = float(np.exp(-np.maximum(comps, 0.0)).mean())
    e_direct = float(direct.mean())
    e_indirect = float((per_layer_total - direct).mean())
    return {
        "effective_circuit_depth": float(np.sum(per_layer_max > threshold)),
        "causal_path_length": float(np.sum(patch > threshold)),
        "ablation_robustness": robustness,
        "critical_component_count": float(np.sum(comps > threshold)),
        "performance_degradation_slope": _std(per_layer_total, ddof=0),
        "intervention_sensitivity": 1.0 - robustness,
        "direct_logit_attribution": e_direct,
        "indirect_effect_strength": e_indirect,
        "causal_mediation_score": e_direct * e_indirect,
        "activation_patching_effect": float(patch.mean()),
    }


# --------------------------------------------------------------------------- all 37


def radar_features(trace: RadarTrace, config: RadarFeatureConfig | None = None) -> dict[str, float]:
    """All 37 features of one trace, keyed by name in :data:`FEATURE_NAMES` order.

    Raises:
        InputError: the trace lacks attentions, or ``"measured"`` was asked for a trace
            captured without interventions.
    """
    cfg = config or RadarFeatureConfig()
    he = head_entropies(trace.attentions, cfg.attention_entropy)
    values: dict[str, float] = {}
    values.update(surface_features(trace.confidence, trace.entropy))
    values.update(attention_features(he, cfg.specialization_threshold))
    values.update(working_memory_features(trace.states))
    if cfg.feature_set == "measured":
        if trace.effects is None:
            raise InputError(
                "the 'measured' feature set needs interventions; capture with measured=True",
                field="feature_set",
            )
        values.update(measured_causal_features(trace.effects, cfg.effect_threshold))
    else:
        values.update(paper_causal_features(he, cfg.specialization_threshold))
    out = {name: values[name] for name in FEATURE_NAMES}
    bad = [k for k, v in out.items() if not math.isfinite(v)]
    if bad:
        raise InputError(f"non-finite RADAR features {bad} for prompt {trace.prompt[:40]!r}")
    return out
