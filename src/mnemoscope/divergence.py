"""The one KL divergence: from log-probabilities, for numpy arrays and torch tensors alike.

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

from typing import Any, TypeVar

import numpy as np

__all__ = ["kl_logprobs"]

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
