"""Request and response bodies of the audit API (pydantic; they make the OpenAPI document)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AuditIn",
    "AuditOptions",
    "AuditOut",
    "BatchIn",
    "BatchOut",
    "ErrorOut",
    "HistoryOut",
    "RePCSOut",
    "StatsOut",
    "ValidationErrorOut",
]


class AuditOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_new_tokens: int | None = Field(
        None, ge=1, le=1024, description="answer length T (default: the profile's; capped by the server)"
    )
    return_generation: bool = Field(True, description="include the with-context answer in the response")


class AuditIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    context: str = Field(..., max_length=200_000, description="the retrieved context (may be empty)")
    query: str = Field(..., min_length=1, max_length=20_000, description="the user's query")
    options: AuditOptions | None = None


class BatchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[AuditIn] = Field(
        ..., min_length=1, description="audits to run (at most the server's batch limit)"
    )


class RePCSOut(BaseModel):
    kl: float = Field(..., description="Z = sum of per-step KL(P_rag || P_para) over the answer (nats)")
    tau: float | None = Field(
        ...,
        description="threshold calibrated on clean queries; null when the calibration had too few clean "
        "queries to certify its alpha (then nothing is flagged memorized)",
    )
    memorized: bool = Field(..., description="Z < tau: the context changed the answer little")


class AuditOut(BaseModel):
    id: str
    created_at: float
    anomaly_flag: bool
    anomaly_score: float
    lts_trajectory: list[float]
    lts_z: list[float]
    layers: list[int]
    flagged_layers: list[int]
    repcs: RePCSOut
    crm_probability: float | None = None
    generation: str | None = None
    latency_ms: float
    model: dict[str, Any]
    profile_hash: str
    n_steps: int
    notes: list[str] = Field(default_factory=list)
    context: str | None = None
    query: str | None = None
    seq: int | None = None


class ErrorOut(BaseModel):
    detail: str
    field: str | None = None
    index: int | None = None


class ValidationErrorItem(BaseModel):
    loc: list[str]
    msg: str
    type: str


class ValidationErrorOut(BaseModel):
    """The body of every 422: the first problem in ``detail``, all of them (up to 10) in ``errors``."""

    detail: str
    field: str | None = None
    errors: list[ValidationErrorItem] = Field(default_factory=list)


class BatchItemOut(BaseModel):
    ok: bool
    audit: AuditOut | None = None
    error: ErrorOut | None = None
    status: int


class BatchOut(BaseModel):
    items: list[BatchItemOut]


class HistoryOut(BaseModel):
    items: list[dict[str, Any]]
    total: int
    limit: int
    offset: int


class StatsOut(BaseModel):
    model: dict[str, Any]
    profile: dict[str, Any]
    n_audits: int
    n_anomalies: int
    anomaly_rate: float | None
    n_memorized: int
    latency_ms: dict[str, float | None]
    queue: dict[str, Any]
    log_head: dict[str, Any]
    uptime_s: float
