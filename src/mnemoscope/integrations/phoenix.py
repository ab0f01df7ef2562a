"""Arize Phoenix: send audit spans to a Phoenix server and write verdicts back as span annotations.

Phoenix receives the audit spans like any OTLP collector (point
``OTEL_EXPORTER_OTLP_ENDPOINT`` at it, or :func:`tracer_provider` for an explicit provider).
:func:`annotate` then writes each verdict as a span annotation (``label`` = source, ``score``
= p_memory, ``explanation`` = the verdict's sentence) so that it shows in Phoenix's UI next to
the answer. Only HTTP (``httpx``) is used here; Phoenix itself runs as a separate server
(``scripts/ci_services.sh`` installs it into its own virtualenv).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["annotate", "get_spans", "tracer_provider"]


def tracer_provider(base_url: str, project: str, *, simple: bool = False) -> Any:
    """An OpenTelemetry tracer provider exporting OTLP/HTTP to Phoenix's ``/v1/traces`` under ``project``.

    ``simple=True`` exports each span as it ends (tests); the default batches on a background thread.
    """
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    provider = TracerProvider(
        resource=Resource.create({"service.name": "mnemoscope", "openinference.project.name": project})
    )
    exporter = OTLPSpanExporter(endpoint=base_url.rstrip("/") + "/v1/traces")
    provider.add_span_processor(SimpleSpanProcessor(exporter) if simple else BatchSpanProcessor(exporter))
    return provider


def get_spans(base_url: str, project: str, *, timeout: float = 30.0) -> list[dict[str, Any]]:
    """Every span of a Phoenix project through its REST API (``GET /v1/projects/{project}/spans``)."""
    import httpx

    out: list[dict[str, Any]] = []
    cursor = None
    with httpx.Client(base_url=base_url, timeout=timeout) as c:
        while True:
            params: dict[str, Any] = {"limit": 1000}
            if cursor:
                params["cursor"] = cursor
            r = c.get(f"/v1/projects/{project}/spans", params=params)
            if r.status_code == 404:
                return []
            r.raise_for_status()
            body = r.json()
            out.extend(body.get("data", []))
            cursor = body.get("next_cursor")
            if not cursor:
                return out


def annotate(
    base_url: str,
    items: Iterable[tuple[str, dict[str, Any]]],
    *,
    name: str = "mnemoscope",
    timeout: float = 30.0,
) -> int:
    """Write verdicts as Phoenix span annotations; ``items`` are ``(span_id hex, AuditResult.to_dict())``.

    Returns the number of annotations Phoenix accepted.
    """
    import httpx

    data: Sequence[dict[str, Any]] = [
        {
            "span_id": span_id,
            "name": name,
            "annotator_kind": "CODE",
            "result": {
                "label": audit["source"],
                "score": audit.get("p_memory"),
                "explanation": audit.get("summary"),
            },
            "metadata": {
                "rule": audit.get("rule"),
                "memory_flag": audit.get("memory_flag"),
                "repcs_z": (audit.get("evidence") or {}).get("repcs_z"),
                "certified": (audit.get("guarantee") or {}).get("certified"),
            },
        }
        for span_id, audit in items
    ]
    if not data:
        return 0
    with httpx.Client(base_url=base_url, timeout=timeout) as c:
        r = c.post("/v1/span_annotations", json={"data": list(data)})
        r.raise_for_status()
    return len(data)
