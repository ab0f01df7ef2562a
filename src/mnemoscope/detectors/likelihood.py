"""Likelihood membership attacks: the bar every detector must clear.

All scores are oriented so that higher = more likely a member (seen in training).

======================  =====================================================================
name                    score
======================  =====================================================================
``loss``                -L(x), L = mean negative log-likelihood per predicted token (Yeom et al.)
``zlib``                -L(x) / zlib(x), zlib(x) = bytes of zlib-compressed UTF-8 text (Carlini et al. 2021)
``lowercase``           L(lower(x)) - L(x): log of the perplexity ratio lower-cased / original (Carlini)
``min_k_10/20``         mean of the lowest k% token log-probs (Shi et al. 2024, Min-K% Prob)
``min_k_pp_10/20``      mean of the lowest k% of (log p(x_t) - mu_t) / sigma_t (Zhang et al. 2024,
                        Min-K%++), mu_t / sigma_t = mean / std of log p(z) under p(. | x_<t)
``ref``                 L_ref(x) - L(x): the suspect's loss calibrated by a reference model
======================  =====================================================================

"Lowest k%" takes ``max(1, floor(k * n))`` tokens of a document with n predicted tokens.
"""

from __future__ import annotations

import zlib
from typing import ClassVar

import numpy as np

from mnemoscope.detectors.base import MembershipData, MembershipMethod, Requirement
from mnemoscope.features.tokens import TokenStats

__all__ = [
    "LossAttack",
    "LowercaseAttack",
    "MinKAttack",
    "MinKPlusPlusAttack",
    "ReferenceAttack",
    "ZlibAttack",
    "lowest_fraction_mean",
]

_SIGMA_FLOOR = 1e-6


def lowest_fraction_mean(values: np.ndarray, k: float) -> float:
    """Mean of the ``max(1, floor(k * n))`` smallest values.

    >>> lowest_fraction_mean(np.array([-5.0, -1.0, -3.0, -2.0]), 0.5)
    -4.0
    """
    if not 0 < k <= 1:
        raise ValueError(f"k must be in (0, 1], got {k}")
    n = values.shape[0]
    if n == 0:
        raise ValueError("no token scores")
    m = max(1, int(np.floor(k * n)))
    return float(np.sort(values)[:m].mean())


class LossAttack(MembershipMethod):
    def score(self, data: MembershipData) -> np.ndarray:
        return np.array([-s.loss for s in data.require("target")])


class ZlibAttack(MembershipMethod):
    def score(self, data: MembershipData) -> np.ndarray:
        stats: list[TokenStats] = data.require("target")
        return np.array(
            [-s.loss / len(zlib.compress(t.encode("utf-8"))) for s, t in zip(stats, data.texts, strict=True)]
        )


class LowercaseAttack(MembershipMethod):
    requires: ClassVar[frozenset[Requirement]] = frozenset({"target", "lowercase"})

    def score(self, data: MembershipData) -> np.ndarray:
        pairs = zip(data.require("lowercase"), data.require("target"), strict=True)
        return np.array([low.loss - orig.loss for low, orig in pairs])


class MinKAttack(MembershipMethod):
    def __init__(self, *, k: float = 0.2):
        self.k = k

    def score(self, data: MembershipData) -> np.ndarray:
        return np.array([lowest_fraction_mean(s.logprobs, self.k) for s in data.require("target")])


class MinKPlusPlusAttack(MembershipMethod):
    def __init__(self, *, k: float = 0.2):
        self.k = k

    def score(self, data: MembershipData) -> np.ndarray:
        out = []
        for s in data.require("target"):
            z = (s.logprobs - s.mu) / np.maximum(s.sigma, _SIGMA_FLOOR)
            out.append(lowest_fraction_mean(z, self.k))
        return np.array(out)


class ReferenceAttack(MembershipMethod):
    requires: ClassVar[frozenset[Requirement]] = frozenset({"target", "reference"})

    def score(self, data: MembershipData) -> np.ndarray:
        pairs = zip(data.require("reference"), data.require("target"), strict=True)
        return np.array([ref.loss - tgt.loss for ref, tgt in pairs])
