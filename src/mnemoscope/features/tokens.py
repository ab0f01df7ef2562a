"""Token-level likelihood statistics of a document, taken from a prompt trace."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mnemoscope.trace.types import PromptTrace

__all__ = ["TokenStats"]


@dataclass(frozen=True)
class TokenStats:
    """Per-token statistics of one document under one model.

    Attributes:
        logprobs: ``[n]`` log p(x_t | x_<t) for t = 2..N (the first token has no prediction).
        mu: ``[n]`` E_z[log p(z | x_<t)] (= minus the entropy of the next-token distribution).
        sigma: ``[n]`` standard deviation of log p(z | x_<t) under that distribution.
    """

    logprobs: np.ndarray
    mu: np.ndarray
    sigma: np.ndarray

    @classmethod
    def from_trace(cls, trace: PromptTrace) -> TokenStats:
        if trace.token_logprobs is None or trace.token_mu is None or trace.token_sigma is None:
            raise ValueError("the trace has no token statistics (trace with Capture(token_stats=True))")
        return cls(trace.token_logprobs, trace.token_mu, trace.token_sigma)

    @property
    def n(self) -> int:
        return int(self.logprobs.shape[0])

    @property
    def loss(self) -> float:
        """Mean negative log-likelihood per predicted token (nats); log-perplexity."""
        if self.n == 0:
            raise ValueError("a one-token document has no predicted tokens")
        return float(-self.logprobs.mean())
