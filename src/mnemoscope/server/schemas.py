"""Request and response bodies of the audit API (pydantic; they make the OpenAPI document)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

__all__ = [
    "AuditIn",
    "AuditOptions",
    "AuditOut",
    "BatchIn",
    "BatchOut",
    "ErrorOut",
    "HistoryOut",
    "ProfileOut",
    "RePCSOut",
    "StatsOut",
    "ValidationErrorOut",
]


class AuditOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_new_tokens: int | None = Field(
        None, ge=1, le=1024, description="answer length T (default: the profile's; capped by the server)"
    )
    return_generation: bool = Field(
        True, description="include the answer and its tokens in the response (and the stored record)"
    )


def _one_context(schema: dict[str, Any]) -> None:
    """The body's JSON schema says what the validator checks: exactly one of context and passages,
    neither null, passages distinct and not blank (so generated valid bodies are valid)."""
    props = schema.get("properties", {})
    for name in ("context", "passages"):
        f = props.get(name, {})
        kept = [x for x in f.pop("anyOf", []) if x.get("type") != "null"]
        if kept:
            f.update(kept[0])
        f.pop("default", None)
    if "passages" in props:
        props["passages"]["items"] = {"type": "string", "pattern": "\\S"}
        props["passages"]["uniqueItems"] = True
    schema["oneOf"] = [{"required": ["context"]}, {"required": ["passages"]}]


class AuditIn(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_one_context)

    context: str | None = Field(
        None,
        max_length=200_000,
        description='the retrieved context (may be empty: "" is an explicit empty context); give it or '
        "passages, not both",
    )
    query: str = Field(..., min_length=1, max_length=20_000, description="the user's query")
    answer: str | None = Field(
        None,
        min_length=1,
        max_length=50_000,
        description="an answer to score instead of generating one (e.g. what your RAG chain's LLM said); "
        "it is teacher-forced with and without the context (capped by the server's max_answer_tokens)",
    )
    options: AuditOptions | None = None
    passages: list[str] | None = Field(
        None,
        min_length=1,
        max_length=1_000,
        description="the retrieved passages, in retrieval order (instead of context): the context is them "
        "joined by a blank line (mnemoscope.trace.passages.join_passages); each non-blank, none twice",
        validate_default=True,
    )

    @field_validator("passages")
    @classmethod
    def _passages(cls, v: list[str] | None, info: ValidationInfo) -> list[str] | None:
        """Exactly one of context and passages; passages checked by the audit's own rule
        (``check_passages``). Errors sit at ``passages`` (a 422 naming the field)."""
        from mnemoscope.audit.requests import check_passages
        from mnemoscope.errors import InputError

        context = info.data.get("context")
        if v is None:
            if context is None:
                raise ValueError('give context (a string; "" for an explicit empty context) or passages')
            return v
        if context is not None:
            raise ValueError("give either context or passages, not both (the context is the passages joined)")
        try:
            return list(check_passages(v))
        except InputError as e:
            raise ValueError(e.reason) from None


class BatchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[AuditIn] = Field(
        ..., min_length=1, description="audits to run (at most the server's batch limit)"
    )


class RePCSOut(BaseModel):
    kl: float | None = Field(
        ..., description="Z = sum of per-step KL(P_rag || P_para) over the answer (nats)"
    )
    tau: float | None = Field(
        ...,
        description="threshold calibrated on clean queries; null when the calibration had too few clean "
        "queries to certify its alpha (then nothing is flagged memorized)",
    )
    memorized: bool = Field(
        ..., description="Z < tau: the context changed the answer little (never for an empty context)"
    )
    n_steps: int | None = None
    identical_prompts: bool = False
    note: str | None = None


class EvidenceOut(BaseModel):
    repcs_z: float | None = Field(
        ..., description="RePCS Z: summed KL(P_with || P_without) over the answer (nats)"
    )
    tau: float | None = Field(..., description="RePCS threshold on clean queries (null: not certified)")
    closed_book_logprob: float | None = Field(
        ...,
        description="mean log p(answer token | query alone): high = the model knew it without the context",
    )
    context_token_fraction: float | None = Field(
        ..., description="share of attributed answer words the context supports (null: none attributed)"
    )
    threshold: float | None = Field(None, description="the p_memory (or score) threshold of the memory flag")
    signals_used: list[str] = Field(default_factory=list, description="signals the verdict model combines")
    signals: dict[str, float] | None = Field(
        None,
        description="every verdict signal measured on this answer (whole-answer and answer-bearing words)",
    )
    answer_words: dict[str, Any] | None = Field(
        None,
        description="the answer-bearing phrases (what answers the query), each with its two facts: need "
        "(memory: the model writes it without the context) and support (the passages that state it, "
        "'passages', and the one it is traced to, 'passage', with the leave-one-passage-out effect); "
        "'grounded' is memory, context (stated and needed) or unsupported (neither); null for profiles "
        "decided on all words",
    )
    closed_book_answer: str | None = Field(
        None, description="the model's own closed-book greedy answer (null: the audit did not generate one)"
    )


class GuaranteeOut(BaseModel):
    alpha: float
    n_calibration: int
    certified: bool = Field(..., description="false: the calibration set was too small to certify alpha")
    threshold: float | None = None
    statement: str
    profile: dict[str, Any] | None = Field(
        None,
        description="is the profile fit to back the guarantee: ok, status (validated | marked), reasons, "
        "summary of its held-out card (pipelines.validation.profile_status)",
    )


class TokenOut(BaseModel):
    text: str
    source: str = Field(..., description="context | memory | neutral")
    pmi: float | None = Field(..., description="log p(token | context, query) - log p(token | query)")
    kl: float | None = Field(..., description="KL(P_with || P_without) at this step (nats)")
    logp_with: float | None = None
    logp_without: float | None = None
    start: int
    end: int


class SpanOut(BaseModel):
    text: str
    source: str
    start: int = Field(..., description="character offset into answer")
    end: int
    pmi: float | None = None


class FallbackOut(BaseModel):
    """A scoring path that failed this record before the one that scored it (``auto``)."""

    path: str = Field(..., description="the scoring path that failed: grammar | positions | native | echo")
    status: int | None = Field(
        None, description="the server's HTTP status (null: no HTTP answer, e.g. a timeout or a parse failure)"
    )
    message: str = Field(..., description="why the path failed, as the audit saw it")


class BoundedPositionsOut(BaseModel):
    """Answer positions whose log-prob is an upper bound, per path (0-based answer token indices)."""

    with_context: list[int] = Field(default_factory=list, alias="with-context")
    no_context: list[int] = Field(default_factory=list, alias="no-context")

    model_config = ConfigDict(populate_by_name=True)


class AnswerCutOut(BaseModel):
    """Where a stop sequence of the profile ended the generated answer."""

    at: int = Field(..., description="character offset of the stop sequence in the generated text")
    stop: str = Field(..., description="the stop sequence")
    token: int = Field(..., description="answer tokens audited (the first token not audited)")


_LEGACY = "compatibility (only with the server setting legacy_crm_fields=true): "


class AuditOut(BaseModel):
    """One audit. The verdict is ``source`` / ``memory_flag`` / ``p_memory`` (with ``evidence`` and
    ``guarantee``); CRM's secondary rule and classifier sit under ``crm``."""

    id: str
    created_at: float
    source: str = Field(
        ...,
        description="where the answer came from: context | memory | mixed | undetermined | unsupported",
    )
    memory_flag: bool | None = Field(
        ...,
        description="the rule's memory flag: the decision the guarantee is about (count and filter on this); "
        "null for a record stored before the flag was recorded",
    )
    p_memory: float | None = Field(..., description="probability the answer came from memory (equal priors)")
    answer: str | None = None
    answer_given: bool = Field(False, description="true: the caller supplied the answer (it was scored)")
    summary: str = Field(..., description="the verdict in words")
    rule: str
    evidence: EvidenceOut
    guarantee: GuaranteeOut
    tokens: list[TokenOut] = Field(default_factory=list)
    spans: list[SpanOut] = Field(default_factory=list)
    crm: dict[str, Any] | None = Field(
        None,
        description="secondary: CRM's LTS anomaly rule (anomaly_flag, anomaly_score, lts_trajectory, lts_z, "
        "layers, flagged_layers) and classifier (crm_probability); null when not measured",
    )
    repcs: RePCSOut
    identical_prompts: bool = False
    latency_ms: float
    model: dict[str, Any]
    profile_hash: str
    n_steps: int
    notes: list[str] = Field(default_factory=list)
    context: str | None = None
    query: str | None = None
    seq: int | None = None
    backend: str | None = Field(None, description="'endpoint' when the model is served (docs/endpoint.md)")
    endpoint_method: str | None = Field(None, description="the log-prob mechanism used over the endpoint")
    unavailable: list[str] | None = Field(None, description="signals not measured over the endpoint")
    fallbacks: list[FallbackOut] | None = Field(
        None,
        description="over an endpoint under method auto: the scoring paths that failed this record (a "
        "refusal, an HTTP error after the retries, an unparsable answer) before endpoint_method scored "
        "it, in order, with the cause; empty when the first path scored it",
    )
    bounded: bool | None = Field(
        None,
        description="over an endpoint: true when at some answer position the answer's token was outside "
        "the top-k the server returned, so its log-prob there is an upper bound (min of the k-th "
        "probability and the tail mass), not the exact value; the audit is not refused for it",
    )
    bounded_positions: BoundedPositionsOut | None = Field(
        None, description="over an endpoint: the bounded positions per path (see bounded)"
    )
    answer_cut: AnswerCutOut | None = Field(
        None,
        description="with stop sequences in the profile: where one ended the generated answer (null: it "
        "ended by itself or at max_new_tokens); absent when the profile has no stop sequences",
    )
    anomaly_flag: bool | None = Field(None, description=_LEGACY + "crm.anomaly_flag")
    anomaly_score: float | None = Field(None, description=_LEGACY + "crm.anomaly_score")
    lts_trajectory: list[float | None] | None = Field(None, description=_LEGACY + "crm.lts_trajectory")
    lts_z: list[float | None] | None = Field(None, description=_LEGACY + "crm.lts_z")
    layers: list[int] | None = Field(None, description=_LEGACY + "crm.layers")
    flagged_layers: list[int] | None = Field(None, description=_LEGACY + "crm.flagged_layers")
    crm_probability: float | None = Field(None, description=_LEGACY + "crm.crm_probability")
    generation: str | None = Field(None, description=_LEGACY + "answer")


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
    items: list[dict[str, Any]] = Field(..., description="audits, newest first (a pruned one is a stub)")
    limit: int
    next_before_seq: int | None = Field(
        ..., description="pass as before_seq for the next (older) page; null on the last page"
    )
    filters: dict[str, Any] = Field(..., description="the filters this page was selected with")


class StatsOut(BaseModel):
    model: dict[str, Any]
    profile: dict[str, Any]
    n_audits: int
    by_source: dict[str, int] = Field(
        ...,
        description="stored audits by where the answer came from (context, memory, mixed, undetermined, "
        "unsupported)",
    )
    n_memory_flag: int = Field(..., description="stored audits the rule flagged as memory")
    memory_flag_rate: float | None
    latency_ms: dict[str, float | None]
    queue: dict[str, Any]
    log_head: dict[str, Any]
    uptime_s: float


class ProfileOut(BaseModel):
    """The profile behind the verdicts (``card``: see ``mnemoscope profile show``)."""

    rule: str = Field(..., description="the rule the server decides with")
    path: str
    hash: str
    card: dict[str, Any]
