"""RePCS: retrieval-path KL scoring (``../shared/papers/repcs-retrieval-path-kl.txt``).

Z(q) = KL(P_rag || P_para) over the first T generated positions: the answer is generated on
the retrieval-augmented path, the same tokens are teacher-forced on the query-only path
(a :class:`~mnemoscope.trace.PairTrace`), and the per-step KLs are summed (the paper's
default) or averaged. A small Z means the context changed little: flag "memorized" when
Z < tau, with tau the alpha-quantile of Z on clean (context-needed) calibration queries.

Scores handed to the bench are oriented as everywhere in mnemoscope: ``score = -Z``, so
higher = more likely memorized.

Three ways to get the per-step KL:

* ``full``: the exact full-vocabulary KL the tracer computed (model internals available);
* from full log-probability arrays ``[step vocab]`` supplied by the caller;
* ``topk``: from the top-k log-probabilities per step and path that OpenAI-compatible
  servers return (k <= 20), with the truncated estimator :func:`topk_kl` below.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from sklearn.base import BaseEstimator

from mnemoscope.detectors.base import MembershipData, MembershipMethod, Requirement
from mnemoscope.divergence import kl_logprobs, topk_kl
from mnemoscope.errors import InputError
from mnemoscope.stats.conformal import conformal_lower
from mnemoscope.trace.types import PairTrace

__all__ = [
    "Aggregate",
    "ClosedBookLogprob",
    "Direction",
    "PacBound",
    "RePCS",
    "RePCSMethod",
    "StepKL",
    "dkw_epsilon",
    "kl_from_logprobs",
    "paper_sample_size",
    "quantile_threshold",
    "step_kls",
    "topk_kl",
    "topk_kl_from_trace",
]

Aggregate = Literal["sum", "mean"]
Direction = Literal["forward", "reverse", "symmetric"]
Estimator = Literal["full", "topk"]
_EPS = 1e-12


@dataclass(frozen=True)
class StepKL:
    """Per-step KL in both directions for one query (nats)."""

    forward: np.ndarray  # KL(P_rag || P_para)
    reverse: np.ndarray  # KL(P_para || P_rag)

    def series(self, direction: Direction) -> np.ndarray:
        if direction == "forward":
            return self.forward
        if direction == "reverse":
            return self.reverse
        return 0.5 * (self.forward + self.reverse)


def _check_finite(name: str, a: np.ndarray, record: str | None) -> None:
    if not np.all(np.isfinite(a)):
        bad = int(np.argwhere(~np.isfinite(a))[0][0])
        raise InputError(f"non-finite value (NaN or inf) at step {bad}", record=record, field=name)


def kl_from_logprobs(lp_rag: np.ndarray, lp_para: np.ndarray, *, record: str | None = None) -> StepKL:
    """Per-step KL from full log-probability arrays ``[step vocab]`` (each row normalised or not).

    Rows are renormalised with log-sum-exp, so unnormalised log-scores are accepted.
    """
    a = np.asarray(lp_rag, dtype=np.float64)
    b = np.asarray(lp_para, dtype=np.float64)
    if a.ndim != 2 or a.shape != b.shape:
        raise InputError(
            f"log-prob arrays must both be [step vocab], got {a.shape} and {b.shape}", record=record
        )
    _check_finite("rag_logprobs", a, record)
    _check_finite("para_logprobs", b, record)
    a = a - np.logaddexp.reduce(a, axis=1, keepdims=True)
    b = b - np.logaddexp.reduce(b, axis=1, keepdims=True)
    return StepKL(kl_logprobs(a, b), kl_logprobs(b, a))


def topk_kl_from_trace(trace: PairTrace, k: int | None = None) -> StepKL:
    """The top-k estimator applied to the top-k a :class:`PairTrace` kept (what an API would return)."""
    kk = trace.topk_ids_with.shape[1] if k is None else k
    fwd, rev = [], []
    for t in range(trace.n_steps):
        rag = dict(
            zip(trace.topk_ids_with[t, :kk].tolist(), trace.topk_logprobs_with[t, :kk].tolist(), strict=True)
        )
        para = dict(
            zip(
                trace.topk_ids_without[t, :kk].tolist(),
                trace.topk_logprobs_without[t, :kk].tolist(),
                strict=True,
            )
        )
        f, r = topk_kl(rag, para)
        fwd.append(f)
        rev.append(r)
    return StepKL(np.array(fwd), np.array(rev))


def step_kls(trace: PairTrace, estimator: Estimator = "full", k: int | None = None) -> StepKL:
    if estimator == "full":
        return StepKL(
            np.asarray(trace.kl_steps, dtype=np.float64), np.asarray(trace.kl_rev_steps, dtype=np.float64)
        )
    return topk_kl_from_trace(trace, k)


def quantile_threshold(
    z: np.ndarray, alpha: float, method: Literal["conformal", "paper"] = "conformal"
) -> float:
    """tau = the k-th smallest calibration score with k = floor(alpha * (n + 1)) (``conformal``).

    ``method="paper"`` reproduces the paper's "alpha-quantile / 5th percentile" literally
    (``np.quantile``, linear interpolation), which carries no finite-sample guarantee.

    For a new clean score exchangeable with the n calibration scores (and no ties), the
    rank of Z_new among all n + 1 is uniform, so P(Z_new < tau) = k / (n + 1) <= alpha:
    a finite-sample, distribution-free guarantee on the expected false-positive rate
    (the conformal quantile). With fewer than 1/alpha - 1 scores no such k exists
    and tau = -inf (nothing is ever flagged): calibrate on more queries.
    """
    if method == "paper":
        if not 0 < alpha < 1:
            raise InputError(f"alpha must be in (0, 1), got {alpha}", field="alpha")
        return float(np.quantile(np.asarray(z, dtype=np.float64), alpha))
    return conformal_lower(z, alpha)


def dkw_epsilon(n: int, delta: float) -> float:
    """Massart's DKW band: sup |F_n - F| <= sqrt(log(2 / delta) / (2 n)) with probability 1 - delta."""
    return math.sqrt(math.log(2.0 / delta) / (2.0 * n))


def paper_sample_size(gamma: float, T: int, delta_gap: float, epsilon: float) -> float:
    """RePCS Theorem III.4: n >= 8 gamma^2 T Delta^-2 log(2 / epsilon)."""
    return 8.0 * gamma**2 * T * math.log(2.0 / epsilon) / delta_gap**2


@dataclass(frozen=True)
class PacBound:
    """What the calibration guarantees, with how each quantity was estimated."""

    n: int
    alpha: float
    delta: float
    empirical_fpr: float
    dkw_epsilon: float
    fpr_upper_bound: float
    gamma: float | None
    gamma_method: str
    delta_gap: float | None
    delta_gap_method: str
    epsilon: float
    paper_required_n: float | None
    paper_bound_satisfied: bool | None


class RePCS(BaseEstimator):
    """The RePCS detector: KL score, calibrated threshold, decisions.

    Args:
        alpha: target false-positive rate on clean queries (tau = alpha-quantile of clean Z).
        aggregate: ``"sum"`` over steps (paper) or ``"mean"``.
        direction: ``"forward"`` KL(P_rag || P_para) (paper), ``"reverse"`` or ``"symmetric"``.
        max_steps: use only the first T positions (``None`` = all the trace has).
        estimator: ``"full"`` vocabulary KL or the ``"topk"`` truncated estimator.
        k: top-k for the ``topk`` estimator (``None`` = all the trace kept, 20 by default).
        delta: confidence parameter of the DKW guarantee.
        epsilon: target false-negative rate in the paper's sample-size bound.
        quantile: ``"conformal"`` (default; the k-th order statistic with a finite-sample
            guarantee) or ``"paper"`` (``np.quantile``, as the paper's "5th percentile").

    Example:
        >>> det = RePCS(alpha=0.05).fit_scores(np.linspace(1, 10, 99))
        >>> det.tau_, bool(det.flag(np.array([0.5]))[0])
        (1.3673469387755102, True)
    """

    def __init__(
        self,
        *,
        alpha: float = 0.05,
        aggregate: Aggregate = "sum",
        direction: Direction = "forward",
        max_steps: int | None = None,
        estimator: Estimator = "full",
        k: int | None = None,
        delta: float = 0.05,
        epsilon: float = 0.05,
        quantile: Literal["conformal", "paper"] = "conformal",
    ):
        self.alpha = alpha
        self.aggregate = aggregate
        self.direction = direction
        self.max_steps = max_steps
        self.estimator = estimator
        self.k = k
        self.delta = delta
        self.epsilon = epsilon
        self.quantile = quantile

    # -- scores -----------------------------------------------------------------------------------

    def kl_series(self, trace: PairTrace) -> np.ndarray:
        s = step_kls(trace, self.estimator, self.k).series(self.direction)
        return s[: self.max_steps] if self.max_steps is not None else s

    def z(self, traces: Sequence[PairTrace]) -> np.ndarray:
        """Z per trace (nats). An empty context gives Z = 0 by construction (see ``trace.identical_prompts``)."""
        out = []
        for t in traces:
            s = self.kl_series(t)
            out.append(float(s.sum() if self.aggregate == "sum" else (s.mean() if len(s) else 0.0)))
        return np.array(out)

    # -- calibration ----------------------------------------------------------------------------

    def fit(self, traces: Sequence[PairTrace], y: np.ndarray | None = None) -> RePCS:
        """Calibrate tau on traces; with labels, only the clean ones (label 0) set tau and the
        memorized ones (label 1) serve to estimate the paper's gap Delta."""
        z = self.z(traces)
        labels = None if y is None else np.asarray(y)
        clean = z if labels is None else z[labels == 0]
        memorized = None if labels is None else z[labels == 1]
        ratios = []
        for t, is_clean in zip(
            traces, np.ones(len(traces), bool) if labels is None else labels == 0, strict=True
        ):
            if is_clean:
                lr = np.abs(
                    np.asarray(t.logprob_answer_with, float) - np.asarray(t.logprob_answer_without, float)
                )
                ratios.append(lr[: self.max_steps] if self.max_steps is not None else lr)
        gamma = float(np.max(np.concatenate(ratios))) if ratios and sum(map(len, ratios)) else None
        T = self.max_steps or max((t.n_steps for t in traces), default=0)
        return self.fit_scores(clean, memorized=memorized, gamma=gamma, T=T)

    def fit_scores(
        self,
        clean_z: np.ndarray,
        *,
        memorized: np.ndarray | None = None,
        gamma: float | None = None,
        T: int | None = None,
    ) -> RePCS:
        """Calibrate from precomputed clean scores (e.g. from log-prob files)."""
        clean_z = np.asarray(clean_z, dtype=np.float64)
        if clean_z.ndim != 1 or len(clean_z) == 0:
            raise InputError("calibration needs at least one clean score")
        if not np.all(np.isfinite(clean_z)):
            raise InputError("calibration scores contain NaN or inf")
        n = len(clean_z)
        self.tau_ = quantile_threshold(clean_z, self.alpha, self.quantile)
        emp = float(np.mean(clean_z < self.tau_))
        eps = dkw_epsilon(n, self.delta)
        gap = None
        if memorized is not None and len(memorized):
            gap = float(np.mean(clean_z) - np.mean(memorized))
        required = None
        if gamma is not None and gap is not None and gap > 0 and T:
            required = paper_sample_size(gamma, T, gap, self.epsilon)
        self.bound_ = PacBound(
            n=n,
            alpha=self.alpha,
            delta=self.delta,
            empirical_fpr=emp,
            dkw_epsilon=eps,
            fpr_upper_bound=min(1.0, emp + eps),
            gamma=gamma,
            gamma_method="max over clean calibration steps of |log P_rag(y_t) - log P_para(y_t)|",
            delta_gap=gap,
            delta_gap_method="mean Z(clean) - mean Z(memorized) on the calibration records"
            if gap is not None
            else "not measured (no memorized calibration records)",
            epsilon=self.epsilon,
            paper_required_n=required,
            paper_bound_satisfied=None if required is None else bool(n >= required),
        )
        self.n_calibration_ = n
        self.T_ = T
        return self

    # -- decisions ------------------------------------------------------------------------------

    def flag(self, z: np.ndarray) -> np.ndarray:
        """True = memorized (Z < tau)."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "tau_")
        return np.asarray(z) < self.tau_

    def predict(self, traces: Sequence[PairTrace]) -> np.ndarray:
        """True = memorized. An empty context (identical prompts) is no evidence: never flagged."""
        z = self.z(traces)
        identical = np.array([bool(t.identical_prompts) for t in traces], dtype=bool)
        return self.flag(z) & ~identical

    @classmethod
    def from_calibration(cls, record: Mapping[str, Any]) -> RePCS:
        """The fitted detector of a saved calibration record (:meth:`calibration_record`).

        Raises:
            InputError: the record is not a RePCS calibration or lacks tau/params.
        """
        if record.get("method") != "repcs" or "params" not in record or "tau" not in record:
            raise InputError("not a RePCS calibration record (needs method 'repcs', params and tau)")
        try:
            det = cls(**dict(record["params"]))
            tau = record["tau"]
            det.tau_ = float("-inf") if tau is None else float(tau)
            det.n_calibration_ = int(record.get("n", 0))
            det.T_ = record.get("T")
            if isinstance(record.get("bound"), Mapping):
                det.bound_ = PacBound(**record["bound"])
        except (TypeError, ValueError) as e:
            raise InputError(f"malformed RePCS calibration record ({e})") from e
        return det

    def calibration_record(self, **extra: Any) -> dict[str, Any]:
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "tau_")
        return {
            "method": "repcs",
            "params": self.get_params(),
            "tau": self.tau_,
            "n": self.n_calibration_,
            "T": self.T_,
            "alpha": self.alpha,
            "bound": asdict(self.bound_),
            **extra,
        }


class RePCSMethod(MembershipMethod):
    """RePCS as a bench method: score = -Z (higher = memorized); needs paired traces."""

    requires: ClassVar[frozenset[Requirement]] = frozenset({"pairs"})

    def __init__(
        self,
        *,
        aggregate: Aggregate = "sum",
        direction: Direction = "forward",
        estimator: Estimator = "full",
        k: int | None = None,
        max_steps: int | None = None,
    ):
        self.aggregate = aggregate
        self.direction = direction
        self.estimator = estimator
        self.k = k
        self.max_steps = max_steps

    def score(self, data: MembershipData) -> np.ndarray:
        det = RePCS(
            aggregate=self.aggregate,
            direction=self.direction,
            estimator=self.estimator,
            k=self.k,
            max_steps=self.max_steps,
        )
        return -det.z(data.require("pairs"))


class ClosedBookLogprob(MembershipMethod):
    """Baseline: mean log p(y_t) of the with-context answer on the query-only path (how sure the
    model is of that answer without the context). Higher = memorized."""

    requires: ClassVar[frozenset[Requirement]] = frozenset({"pairs"})

    def score(self, data: MembershipData) -> np.ndarray:
        return np.array([float(np.mean(t.logprob_answer_without)) for t in data.require("pairs")])
