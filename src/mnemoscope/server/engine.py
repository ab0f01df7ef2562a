"""One audit = one paired trace scored by the profile's CRM and RePCS (no web code here).

The same function serves the HTTP server, its batching queue and plain Python callers:

>>> # engine = AuditEngine(load_model("default"), load_profile("audit-profile/"))
>>> # engine.audit([AuditRequest("Quenmar lies on the Zorblat.", "Which river is Quenmar on?")])

A batch is traced together (left-padded generation, then both paths teacher-forced in one
forward each), which is where dynamic batching saves time. A bad request in a batch gets
its own :class:`AuditFailure`; the others are still audited.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mnemoscope.detectors.repcs import RePCS
from mnemoscope.errors import InputError, MnemoscopeError
from mnemoscope.pipelines.profile import AuditProfile
from mnemoscope.trace.pair import PairItem, PreparedPair, prepare_pair, trace_prepared
from mnemoscope.trace.tracer import Tracer
from mnemoscope.trace.types import PairTrace

__all__ = ["AuditEngine", "AuditFailure", "AuditRequest", "AuditResult"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AuditRequest:
    """What a caller asks: a retrieved context and the query it was retrieved for."""

    context: str
    query: str
    max_new_tokens: int | None = None
    return_generation: bool = True


@dataclass(frozen=True)
class AuditResult:
    """The verdicts and the numbers behind them (all JSON-serialisable)."""

    anomaly_flag: bool
    anomaly_score: float
    lts_trajectory: list[float]
    lts_z: list[float]
    layers: list[int]
    flagged_layers: list[int]
    repcs_kl: float
    repcs_tau: float
    repcs_memorized: bool
    crm_probability: float | None
    generation: str | None
    n_steps: int
    identical_prompts: bool
    n_tokens_context: int
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class AuditFailure:
    """A request that could not be audited, with the field at fault."""

    status: int
    message: str
    field: str | None = None


class AuditEngine:
    """Audits batches of requests on one loaded model with one profile.

    Args:
        lm: the loaded model (must be the profile's model).
        profile: a verified :class:`AuditProfile`.
        max_context_tokens: reject contexts longer than this (422 in the server).
        max_query_tokens: reject queries longer than this.
    """

    def __init__(
        self,
        lm: Any,
        profile: AuditProfile,
        *,
        max_context_tokens: int = 2048,
        max_query_tokens: int = 256,
        batch_size: int = 16,
    ):
        profile.check_model(lm.info)
        self.lm = lm
        self.profile = profile
        self.max_context_tokens = max_context_tokens
        self.max_query_tokens = max_query_tokens
        self.tracer = Tracer(lm, batch_size=batch_size)
        # the calibrated detector's own scoring (estimator, direction, aggregate, T)
        self._repcs = RePCS(**profile.repcs_params)
        self._embedder: Any = None
        if profile.needs_level1:
            from mnemoscope.features.embedding import load_embedder

            self._embedder = load_embedder(profile.header["config"].get("embedder", "default"))

    @property
    def model_info(self) -> dict[str, Any]:
        return dict(self.lm.info.to_dict())

    def _count(self, text: str) -> int:
        return len(self.tracer.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _prepare(self, i: int, req: AuditRequest) -> PreparedPair | AuditFailure:
        if not isinstance(req.query, str) or not req.query.strip():
            return AuditFailure(422, "query is empty", "query")
        if not isinstance(req.context, str):
            return AuditFailure(422, "context must be a string", "context")
        n_ctx, n_q = self._count(req.context), self._count(req.query)
        if n_ctx > self.max_context_tokens:
            return AuditFailure(
                413, f"context has {n_ctx} tokens; the limit is {self.max_context_tokens}", "context"
            )
        if n_q > self.max_query_tokens:
            return AuditFailure(413, f"query has {n_q} tokens; the limit is {self.max_query_tokens}", "query")
        T = req.max_new_tokens or self.profile.max_new_tokens
        try:
            return prepare_pair(
                self.tracer, PairItem(str(i), req.context, req.query), self.profile.pair_config(T)
            )
        except InputError as e:
            return AuditFailure(
                413 if "too long" in e.reason or "window" in e.reason else 422, e.reason, e.field
            )

    def audit(self, requests: Sequence[AuditRequest]) -> list[AuditResult | AuditFailure]:
        """Audit a batch; the result list is aligned with ``requests``."""
        out: list[AuditResult | AuditFailure | None] = [None] * len(requests)
        by_T: dict[int, list[tuple[int, PreparedPair]]] = {}
        for i, req in enumerate(requests):
            p = self._prepare(i, req)
            if isinstance(p, AuditFailure):
                out[i] = p
            else:
                by_T.setdefault(req.max_new_tokens or self.profile.max_new_tokens, []).append((i, p))
        for T, group in by_T.items():
            try:
                traces = trace_prepared(self.tracer, [p for _, p in group], self.profile.pair_config(T))
            except MnemoscopeError as e:
                for i, _ in group:
                    out[i] = AuditFailure(422, str(e))
                continue
            for (i, p), t in zip(group, traces, strict=True):
                try:
                    out[i] = self._score(t, requests[i], len(p.ids_with) - len(p.ids_without))
                except (
                    MnemoscopeError
                ) as e:  # pragma: no cover - defensive: a scoring bug must not drop the batch
                    log.exception("scoring failed")
                    out[i] = AuditFailure(500, f"scoring failed: {e}")
        return [o if o is not None else AuditFailure(500, "not audited") for o in out]

    def _score(self, t: PairTrace, req: AuditRequest, n_ctx_tokens: int) -> AuditResult:
        prof = self.profile
        crm = prof.crm
        lts = crm.lts(t.displacement)
        z, flagged, score, flag = prof.anomaly.decide(lts, crm)
        zscore = float(self._repcs.z([t])[0])
        proba = None
        notes = []
        if crm.classifier != "none":
            from mnemoscope.features.crm import crm_data_from_pairs

            emb = None
            if self._embedder is not None:
                ew = self._embedder.encode([t.answer_with])
                eo = self._embedder.encode([t.answer_without or ""])
                emb = (ew, eo)
            data = crm_data_from_pairs([t], embeddings=emb)
            proba = float(crm.predict_proba(data)[0])
        if t.identical_prompts:
            # LTS = 0 and KL = 0 by construction: no evidence either way, never a flag
            notes.append("empty context: both paths are identical, every statistic is 0 by construction")
            flag, flagged = False, np.zeros_like(flagged)
        return AuditResult(
            anomaly_flag=flag,
            anomaly_score=float(score),
            lts_trajectory=[float(v) for v in lts],
            lts_z=[float(v) for v in z],
            layers=[int(v) for v in crm.layers],
            flagged_layers=[int(crm.layers[j]) for j in np.flatnonzero(flagged)],
            repcs_kl=zscore,
            repcs_tau=prof.repcs_tau,
            repcs_memorized=bool(zscore < prof.repcs_tau) and not t.identical_prompts,
            crm_probability=proba,
            generation=t.answer_with if req.return_generation else None,
            n_steps=int(t.n_steps),
            identical_prompts=bool(t.identical_prompts),
            n_tokens_context=int(n_ctx_tokens),
            notes=notes,
        )
