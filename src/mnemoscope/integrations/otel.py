"""One OpenTelemetry span per audit, in OpenInference conventions plus ``mnemoscope.*`` attributes.

**Off by default, free when off.** :func:`install` (called by ``mnemoscope audit``, the server
and the integrations' handlers) registers :func:`on_audit` in
:data:`mnemoscope.audit.auditor.AUDIT_HOOKS` only when tracing is on; it then runs once per
:meth:`Auditor.audit <mnemoscope.audit.auditor.Auditor.audit>` batch (the CLI, the server,
batch files and the integrations all emit). While tracing is off nothing is registered and
OpenTelemetry is never imported. Tracing turns on when

* a standard OTLP variable is set (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``; headers, timeout and protocol come from the other
  standard ``OTEL_EXPORTER_OTLP_*`` variables, the service from ``OTEL_SERVICE_NAME`` /
  ``OTEL_RESOURCE_ATTRIBUTES``), unless ``OTEL_SDK_DISABLED=true`` or ``MNEMOSCOPE_OTEL=off``;
  mnemoscope then owns a private tracer provider (the application's global one is left alone);
* or the application calls :func:`configure` with its own tracer provider (or ``"global"``).

**The span** ``mnemoscope.audit`` (kind ``EVALUATOR``) is a child of whatever span is current
(a LangChain/LlamaIndex step, a request span): ``input.value`` = the query, ``output.value`` =
the audited answer, ``retrieval.documents.N.document.*`` = the context (as the retrieved
documents when an integration knows them), ``llm.model_name``, ``llm.prompt_template.*``,
``llm.token_count.completion``; and ``mnemoscope.source``, ``mnemoscope.p_memory``,
``mnemoscope.summary``, ``mnemoscope.rule``, ``mnemoscope.repcs.z``, ``mnemoscope.repcs.tau``,
``mnemoscope.guarantee.*``, ``mnemoscope.spans.*`` (the token spans' summary), the context's
truncation policy (``mnemoscope.context.*``) and, for a failed request,
``mnemoscope.status=failed`` with ``mnemoscope.error.*`` and an ERROR status. With
``attach_to_current=True`` the ``mnemoscope.*`` verdict is also set on the current span.

**An unreachable collector** never blocks an audit: spans leave through a batch processor
on a background thread; the first failed export logs one warning, later batches are dropped
quietly for 60 s before the next attempt.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "SPAN_NAME",
    "SpanScope",
    "audit_scope",
    "configure",
    "emit_audit_span",
    "emit_skipped_span",
    "enabled",
    "install",
    "on_audit",
    "result_attributes",
    "shutdown",
    "suppressed",
]

log = logging.getLogger(__name__)

SPAN_NAME = "mnemoscope.audit"
INSTRUMENTATION = "mnemoscope"
MAX_ATTR_CHARS = 4096  # long contexts are cut in the span (stated in mnemoscope.context.span_chars)


@dataclass
class SpanScope:
    """Extra span data an integration supplies for the audits run inside :func:`audit_scope`.

    Attributes:
        documents: the retrieved documents (``{"content", "id"?, "score"?, "metadata"?}``); the
            span lists them instead of one context document.
        attributes: more attributes (e.g. the framework's run ids, the truncation policy).
        span_ids: filled by :func:`on_audit`: the hex span id of each audit emitted in the scope.
        trace_ids: the matching hex trace ids.
    """

    documents: list[dict[str, Any]] | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    span_ids: list[str] = field(default_factory=list)
    trace_ids: list[str] = field(default_factory=list)


_SCOPE: contextvars.ContextVar[SpanScope | None] = contextvars.ContextVar(
    "mnemoscope_span_scope", default=None
)
_SUPPRESSED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "mnemoscope_spans_suppressed", default=False
)


@contextlib.contextmanager
def suppressed() -> Iterator[None]:
    """No audit spans inside (an integration emits the span itself later, with more context)."""
    token = _SUPPRESSED.set(True)
    try:
        yield
    finally:
        _SUPPRESSED.reset(token)


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.decided = False
        self.on = False
        self.tracer: Any = None
        self.provider: Any = None  # only when mnemoscope created it (shut down at exit)
        self.attach = False


_STATE = _State()


def _truthy(v: str | None) -> bool:
    return (v or "").strip().lower() in ("1", "true", "yes", "on")


def _env_wants_tracing() -> bool:
    if _truthy(os.environ.get("OTEL_SDK_DISABLED")) or os.environ.get("MNEMOSCOPE_OTEL", "").lower() == "off":
        return False
    return bool(
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def enabled() -> bool:
    """Whether audits emit spans (decided once from the environment unless :func:`configure` was called)."""
    if _STATE.decided:
        return _STATE.on
    with _STATE.lock:
        if not _STATE.decided:
            if _env_wants_tracing():
                try:
                    _setup_from_env()
                except ImportError as e:
                    log.warning(
                        "OTEL_EXPORTER_OTLP_* is set but OpenTelemetry is not installed "
                        "(pip install 'mnemoscope[otel]'): audit spans are off (%s)",
                        e,
                    )
            _STATE.decided = True
    return _STATE.on


class _GuardedExporter:
    """Wraps an exporter: one warning on the first failure, then drop batches for a while."""

    def __init__(self, inner: Any, endpoint: str, backoff_s: float = 60.0):
        self.inner = inner
        self.endpoint = endpoint
        self.backoff_s = backoff_s
        self._dead_until = 0.0
        self._warned = False

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        if time.monotonic() < self._dead_until:
            return SpanExportResult.FAILURE
        try:
            res = self.inner.export(spans)
        except Exception as e:
            res, why = SpanExportResult.FAILURE, f"{type(e).__name__}: {e}"
        else:
            why = "the exporter reported a failure"
        if res != SpanExportResult.SUCCESS:
            self._dead_until = time.monotonic() + self.backoff_s
            if not self._warned:
                self._warned = True
                log.warning(
                    "OTLP collector %s unreachable (%s): audit spans are dropped (this warning is shown once)",
                    self.endpoint,
                    why,
                )
        return res

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))


def _setup_from_env() -> None:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        inner: Any = GrpcExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        inner = OTLPSpanExporter()
        # the http exporter logs every failed attempt; the guard says it once
        logging.getLogger("opentelemetry.exporter.otlp.proto.http.trace_exporter").setLevel(logging.CRITICAL)
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT", ""
    )
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "mnemoscope")})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(_GuardedExporter(inner, endpoint)))  # type: ignore[arg-type]
    _install(provider, owned=True, attach=_truthy(os.environ.get("MNEMOSCOPE_OTEL_ATTACH")))


def _install(provider: Any, *, owned: bool, attach: bool) -> None:
    import atexit

    from opentelemetry import trace

    from mnemoscope import __version__

    _STATE.tracer = (
        trace.get_tracer(INSTRUMENTATION, __version__)
        if provider == "global"
        else trace.get_tracer(INSTRUMENTATION, __version__, tracer_provider=provider)
    )
    if owned:
        _STATE.provider = provider
        atexit.register(shutdown)
    _STATE.attach = attach
    _STATE.on = True


def configure(tracer_provider: Any = None, *, attach_to_current: bool = False, enabled: bool = True) -> None:
    """Turn audit spans on with the application's tracer provider, or off.

    Args:
        tracer_provider: an OpenTelemetry ``TracerProvider``, ``"global"`` (the globally set one),
            or None with ``enabled=True``: set up from the ``OTEL_EXPORTER_OTLP_*`` variables.
        attach_to_current: also set the ``mnemoscope.*`` verdict on the span current at audit time.
        enabled: False turns spans off (a provider mnemoscope created is shut down).
    """
    with _STATE.lock:
        if _STATE.provider is not None:
            with contextlib.suppress(Exception):
                _STATE.provider.shutdown()
        _STATE.provider, _STATE.tracer, _STATE.on = None, None, False
        _STATE.decided = True
        _register(False)
        if not enabled:
            return
        if tracer_provider is None:
            _setup_from_env()
        else:
            _install(tracer_provider, owned=False, attach=attach_to_current)
        _STATE.attach = attach_to_current or _STATE.attach
        _register(True)


def _register(on: bool) -> None:
    from mnemoscope.audit.auditor import AUDIT_HOOKS

    while on_audit in AUDIT_HOOKS:
        AUDIT_HOOKS.remove(on_audit)
    if on:
        AUDIT_HOOKS.append(on_audit)


def install() -> bool:
    """Register the span hook on :class:`~mnemoscope.audit.auditor.Auditor` when tracing is on
    (environment or :func:`configure`); idempotent. Returns whether spans are on."""
    on = enabled()
    if on:
        with _STATE.lock:
            _register(True)
    return on


def shutdown() -> None:
    """Flush and close the provider mnemoscope created (no-op otherwise)."""
    p = _STATE.provider
    if p is not None:
        with contextlib.suppress(Exception):
            p.shutdown()


@contextlib.contextmanager
def audit_scope(
    documents: Sequence[dict[str, Any]] | None = None, attributes: dict[str, Any] | None = None
) -> Iterator[SpanScope]:
    """Attach retrieval documents and extra attributes to the spans of the audits run inside."""
    scope = SpanScope(
        documents=list(documents) if documents is not None else None, attributes=dict(attributes or {})
    )
    token = _SCOPE.set(scope)
    try:
        yield scope
    finally:
        _SCOPE.reset(token)


# -- attributes ------------------------------------------------------------------------------------


def _cut(text: str) -> str:
    return text if len(text) <= MAX_ATTR_CHARS else text[:MAX_ATTR_CHARS] + " [...]"


def _clean(attrs: dict[str, Any]) -> dict[str, Any]:
    """OTel attributes are str/bool/int/float or homogeneous lists of them; None is dropped."""
    out: dict[str, Any] = {}
    for k, v in attrs.items():
        if v is None:
            continue
        if isinstance(v, (str, bool, int, float)):
            out[k] = v
        elif isinstance(v, (list, tuple)):
            out[k] = [str(x) for x in v]
        else:
            out[k] = json.dumps(v, default=str)
    return out


def result_attributes(result: Any) -> dict[str, Any]:
    """The ``mnemoscope.*`` attributes of one :class:`~mnemoscope.audit.auditor.AuditResult`."""
    d = result.to_dict() if hasattr(result, "to_dict") else dict(result)
    ev, g, rep = d.get("evidence") or {}, d.get("guarantee") or {}, d.get("repcs") or {}
    spans = d.get("spans") or []
    ctx = [s["text"] for s in spans if s.get("source") == "context"]
    mem = [s["text"] for s in spans if s.get("source") == "memory"]
    crm = d.get("crm") or {}
    return _clean(
        {
            "mnemoscope.status": "ok",
            "mnemoscope.source": d.get("source"),
            "mnemoscope.memory_flag": d.get("memory_flag"),
            "mnemoscope.p_memory": d.get("p_memory"),
            "mnemoscope.summary": d.get("summary"),
            "mnemoscope.rule": d.get("rule"),
            "mnemoscope.repcs.z": ev.get("repcs_z"),
            "mnemoscope.repcs.tau": ev.get("tau"),
            "mnemoscope.repcs.memorized": rep.get("memorized"),
            "mnemoscope.closed_book_logprob": ev.get("closed_book_logprob"),
            "mnemoscope.context_token_fraction": ev.get("context_token_fraction"),
            "mnemoscope.guarantee.alpha": g.get("alpha"),
            "mnemoscope.guarantee.certified": g.get("certified"),
            "mnemoscope.guarantee.threshold": g.get("threshold"),
            "mnemoscope.guarantee.statement": g.get("statement"),
            "mnemoscope.spans.n_context": len(ctx),
            "mnemoscope.spans.n_memory": len(mem),
            "mnemoscope.spans.context": ctx or None,
            "mnemoscope.spans.memory": mem or None,
            "mnemoscope.crm.anomaly_flag": crm.get("anomaly_flag"),
            "mnemoscope.n_steps": d.get("n_steps"),
            "mnemoscope.identical_prompts": d.get("identical_prompts"),
            "mnemoscope.notes": d.get("notes") or None,
        }
    )


def _request_attributes(auditor: Any, request: Any, scope: SpanScope | None) -> dict[str, Any]:
    a: dict[str, Any] = {
        "openinference.span.kind": "EVALUATOR",
        "input.value": request.query,
        "input.mime_type": "text/plain",
        "mnemoscope.answer_forced": request.answer is not None,
        "mnemoscope.request_id": request.id,
    }
    docs = scope.documents if scope is not None and scope.documents is not None else None
    if docs is None and request.context:
        docs = [{"content": request.context}]
    for i, doc in enumerate(docs or []):
        p = f"retrieval.documents.{i}.document."
        a[p + "content"] = _cut(str(doc.get("content", "")))
        if doc.get("id") is not None:
            a[p + "id"] = str(doc["id"])
        if doc.get("score") is not None:
            a[p + "score"] = float(doc["score"])
        if doc.get("metadata"):
            a[p + "metadata"] = json.dumps(doc["metadata"], default=str)
    a["mnemoscope.context.chars"] = len(request.context)
    a["mnemoscope.context.span_chars"] = MAX_ATTR_CHARS
    if auditor is not None:
        info = auditor.model_info
        a["llm.model_name"] = info.get("name")
        a["mnemoscope.model.fingerprint"] = info.get("fingerprint")
        a["mnemoscope.profile_hash"] = auditor.profile.content_hash
        prompt = auditor.profile.header.get("prompt", {})
        a["llm.prompt_template.template"] = auditor.profile.builder.render("{context}", "{question}")
        a["llm.prompt_template.variables"] = json.dumps(
            {"context": _cut(request.context), "question": request.query}
        )
        a["llm.invocation_parameters"] = json.dumps(
            {"max_new_tokens": request.max_new_tokens or auditor.profile.max_new_tokens, **prompt}
        )
    if scope is not None:
        a.update(scope.attributes)
    return a


def _record(span: Any, scope: SpanScope | None) -> None:
    if scope is not None:
        ctx = span.get_span_context()
        scope.span_ids.append(format(ctx.span_id, "016x"))
        scope.trace_ids.append(format(ctx.trace_id, "032x"))


def emit_audit_span(
    result: Any,
    request: Any,
    *,
    auditor: Any = None,
    start_ns: int | None = None,
    end_ns: int | None = None,
    batch_size: int = 1,
) -> None:
    """Emit the span of one audited request (an ``AuditResult`` or an ``AuditFailure``). No-op when off."""
    if not enabled():
        return
    from opentelemetry.trace import Status, StatusCode, get_current_span

    scope = _SCOPE.get()
    attrs = _request_attributes(auditor, request, scope)
    attrs["mnemoscope.batch_size"] = batch_size
    failed = not hasattr(result, "source")
    if failed:
        attrs.update(
            {
                "mnemoscope.status": "failed",
                "mnemoscope.error.status": int(result.status),
                "mnemoscope.error.message": result.message,
                "mnemoscope.error.field": result.field,
            }
        )
        verdict: dict[str, Any] = {}
    else:
        verdict = result_attributes(result)
        attrs.update(verdict)
        attrs["output.value"] = result.answer
        attrs["output.mime_type"] = "text/plain"
        attrs["llm.token_count.completion"] = int(result.n_steps)
    span = _STATE.tracer.start_span(SPAN_NAME, attributes=_clean(attrs), start_time=start_ns)
    if failed:
        span.set_status(Status(StatusCode.ERROR, result.message))
    _record(span, scope)
    span.end(end_time=end_ns)
    if _STATE.attach and verdict:
        cur = get_current_span()
        if cur.is_recording():
            cur.set_attributes(verdict)


def emit_skipped_span(query: str, reason: str, attributes: dict[str, Any] | None = None) -> None:
    """A span saying an audit was skipped (e.g. an LLM call fed by no retrieval). No-op when off."""
    if not enabled():
        return
    scope = _SCOPE.get()
    attrs = {
        "openinference.span.kind": "EVALUATOR",
        "input.value": query,
        "mnemoscope.status": "skipped",
        "mnemoscope.skipped_reason": reason,
        **(scope.attributes if scope is not None else {}),
        **(attributes or {}),
    }
    span = _STATE.tracer.start_span(SPAN_NAME, attributes=_clean(attrs))
    _record(span, scope)
    span.end()


def on_audit(auditor: Any, requests: Sequence[Any], results: Sequence[Any], start_ns: int) -> None:
    """The hook :meth:`Auditor.audit` calls once per batch (when registered): one span per request."""
    if not _STATE.on or _SUPPRESSED.get():
        return
    end_ns = time.time_ns()
    try:
        for req, res in zip(requests, results, strict=True):
            emit_audit_span(
                res, req, auditor=auditor, start_ns=start_ns, end_ns=end_ns, batch_size=len(requests)
            )
    except Exception as e:  # tracing must never break an audit
        log.warning("could not emit the audit span: %s: %s", type(e).__name__, e)
