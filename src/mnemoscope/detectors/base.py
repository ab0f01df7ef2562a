"""The contract between the bench and membership methods.

The bench (orchestration) traces documents and hands a :class:`MembershipData` to each
method; a method never touches a model. Unsupervised methods implement :meth:`score`;
supervised ones implement :meth:`features` + :meth:`make_estimator`, and the bench fits
the estimator inside its cross-validation folds (every fitted step on training folds only).

Methods register in :data:`METHODS` (by name, lazily); third-party packages can add
their own through the entry-point group ``mnemoscope.methods``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from sklearn.base import BaseEstimator

from mnemoscope.features.tokens import TokenStats
from mnemoscope.registry import Registry
from mnemoscope.trace.types import PairTrace

__all__ = ["METHODS", "MembershipData", "MembershipMethod", "Requirement"]

Requirement = Literal["target", "reference", "lowercase", "pairs", "text_embeddings"]


@dataclass
class MembershipData:
    """Documents and the traces a method may need (only those some method requires are filled).

    Attributes:
        ids, texts: the documents.
        labels: ``[n]`` 1 = member, 0 = non-member.
        target: token statistics of each text under the suspect model.
        reference: token statistics under the reference model (default: the base without adapter).
        lowercase: token statistics of each lower-cased text under the suspect model.
        pairs: paired traces (context = document), for context-comparing methods.
        answer_embeddings: sentence embeddings ``([n e], [n e])`` of each pair's with- and
            no-context answers (CRM's Level 1), computed by the pipeline that loaded the encoder.
        text_embeddings: ``[n e]`` sentence embeddings of the texts themselves (the blind
            baseline ``blind_embedding``), computed by the pipeline.
    """

    ids: list[str]
    texts: list[str]
    labels: np.ndarray
    target: list[TokenStats] | None = None
    reference: list[TokenStats] | None = None
    lowercase: list[TokenStats] | None = None
    pairs: list[PairTrace] | None = None
    answer_embeddings: tuple[np.ndarray, np.ndarray] | None = None
    text_embeddings: np.ndarray | None = None

    def require(self, what: Requirement) -> list[Any]:
        value = getattr(self, what)
        if value is None:
            raise ValueError(f"this method needs '{what}' traces, which the caller did not provide")
        return value  # type: ignore[no-any-return]


class MembershipMethod(BaseEstimator):
    """Base class of membership methods (scikit-learn style: hyperparameters in ``__init__``).

    Scores are oriented so that higher = more likely a member.
    """

    requires: ClassVar[frozenset[Requirement]] = frozenset({"target"})
    supervised: ClassVar[bool] = False

    def fit(self, data: MembershipData, y: np.ndarray | None = None) -> MembershipMethod:
        """Unsupervised methods have nothing to fit."""
        return self

    def score(self, data: MembershipData) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def features(self, data: MembershipData) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} is not a supervised method")

    def make_estimator(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} is not a supervised method")


METHODS: Registry[MembershipMethod] = Registry(
    "method", base=MembershipMethod, entry_point_group="mnemoscope.methods"
)
_LIK = "mnemoscope.detectors.likelihood"
METHODS.register("loss", f"{_LIK}:LossAttack")
METHODS.register("zlib", f"{_LIK}:ZlibAttack")
METHODS.register("lowercase", f"{_LIK}:LowercaseAttack")
METHODS.register("min_k_10", f"{_LIK}:MinKAttack", k=0.1)
METHODS.register("min_k_20", f"{_LIK}:MinKAttack", k=0.2)
METHODS.register("min_k_pp_10", f"{_LIK}:MinKPlusPlusAttack", k=0.1)
METHODS.register("min_k_pp_20", f"{_LIK}:MinKPlusPlusAttack", k=0.2)
METHODS.register("ref", f"{_LIK}:ReferenceAttack")
_REPCS = "mnemoscope.detectors.repcs"
METHODS.register("repcs", f"{_REPCS}:RePCSMethod")
METHODS.register("repcs_topk", f"{_REPCS}:RePCSMethod", estimator="topk")
METHODS.register("closed_book_logprob", f"{_REPCS}:ClosedBookLogprob")
_CRM = "mnemoscope.detectors.crm"
METHODS.register("crm_lr", f"{_CRM}:CRMMethod", classifier="lr")
METHODS.register("crm_xgb", f"{_CRM}:CRMMethod", classifier="xgb")
_RADAR = "mnemoscope.detectors.radar"
METHODS.register("radar", f"{_RADAR}:RadarMethod")
_BLIND = "mnemoscope.detectors.blind"
METHODS.register("blind_tfidf", f"{_BLIND}:BlindTfidf")
METHODS.register("blind_date", f"{_BLIND}:BlindDate")
METHODS.register("blind_embedding", f"{_BLIND}:BlindEmbedding")
