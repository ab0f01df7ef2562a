"""The one KL divergence: from log-probabilities (numpy or torch), and its top-k estimate.

Every KL in mnemoscope (the paired trace's per-step KL, RePCS's full-vocabulary and top-k
estimates, CRM's logit-lens KL) is computed here, so they agree on conventions: natural log
(nats), the last axis is the distribution, and tiny negative values from rounding are clipped
to 0 (KL is non-negative).

>>> import numpy as np
>>> lp = np.log(np.array([[0.5, 0.5]])); lq = np.log(np.array([[0.9, 0.1]]))
>>> round(float(kl_logprobs(lp, lq)[0]), 4)
0.5108
>>> float(kl_logprobs(lp, lp)[0])
0.0
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeVar

import numpy as np

from mnemoscope.errors import InputError

__all__ = ["kl_logprobs", "topk_kl"]

_EPS = 1e-12

A = TypeVar("A")


def kl_logprobs(logp: A, logq: A) -> A:
    """``KL(p || q) = sum_v p_v (log p_v - log q_v)`` over the last axis, clipped at 0.

    Args:
        logp, logq: log-probabilities of the same shape (normalised; ``log_softmax`` output),
            both numpy arrays or both torch tensors.

    Returns:
        The KL per leading index, of the input's kind and dtype.
    """
    if isinstance(logp, np.ndarray):
        lq: Any = np.asarray(logq)
        return np.maximum((np.exp(logp) * (logp - lq)).sum(-1), 0.0)  # type: ignore[return-value]
    t: Any = logp
    return (t.exp() * (t - logq)).sum(-1).clamp(min=0.0)  # type: ignore[no-any-return]


def _coarse_kl(p: np.ndarray, q: np.ndarray) -> float:
    return float(kl_logprobs(np.log(np.maximum(p, _EPS)), np.log(np.maximum(q, _EPS))))


def topk_kl(rag: Mapping[Any, float], para: Mapping[Any, float]) -> tuple[float, float]:
    """Truncated KL estimate from top-k log-probs of each path at one step.

    The vocabulary is coarse-grained into the union U of the two top-k sets plus one tail
    bucket ("everything else"). For each path, a token of U that the path did not return is
    given ``min(path's k-th largest probability, remaining tail mass / #missing)`` (it was
    not in the path's top-k, so it cannot exceed the k-th value), and the tail bucket gets
    the rest of the mass, so each path's distribution on U + tail sums to 1. KL between
    those two coarse distributions is returned in both directions.

    Coarse-graining can only lower a KL (data-processing inequality), so with exact values
    the estimate is a lower bound of the full-vocabulary KL; the imputation of missing
    entries makes it an approximation. Its AUC against the full KL is measured on the
    context-reliance benchmark (``benchmarks/``).

    Args:
        rag, para: ``{token: log-prob}`` of each path's top-k (k <= 20 on OpenAI-style APIs).

    Returns:
        (KL(rag || para), KL(para || rag)) in nats.
    """
    if not rag or not para:
        raise InputError("top-k log-probs are empty")
    union = list(dict.fromkeys([*rag, *para]))

    def coarse(known: Mapping[Any, float]) -> np.ndarray:
        vals = np.array(list(known.values()), dtype=np.float64)
        if not np.all(np.isfinite(vals)):
            raise InputError("non-finite top-k log-prob")
        probs = np.exp(vals)
        mass = float(probs.sum())
        if mass > 1.0 + 1e-4:
            raise InputError(f"top-k probabilities sum to {mass:.4f} > 1 (not log-probabilities?)")
        tail = max(0.0, 1.0 - mass)
        missing = [t for t in union if t not in known]
        fill = min(float(probs.min()), tail / max(1, len(missing))) if missing else 0.0
        out = np.array([math.exp(known[t]) if t in known else fill for t in union] + [0.0])
        out[-1] = max(0.0, 1.0 - out[:-1].sum())
        return out / out.sum()

    p, q = coarse(rag), coarse(para)
    return _coarse_kl(p, q), _coarse_kl(q, p)
