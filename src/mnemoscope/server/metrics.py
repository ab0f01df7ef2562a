"""Prometheus metrics of one app instance (its own registry, served at ``/metrics``).

Verdicts are counted as the audit decided them: ``mnemoscope_verdicts_total`` by ``source``
(context | memory | mixed | undetermined) and ``memory_flag`` (the rule's flag, the one the
profile's guarantee is about). CRM's LTS anomaly rule is not counted (it is secondary, see
``crm`` in each audit).
"""

from __future__ import annotations

from typing import Any

__all__ = ["SOURCES", "ServerMetrics"]

SOURCES = ("context", "memory", "mixed", "undetermined")


class ServerMetrics:
    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        r = self.registry
        self.audits = Counter("mnemoscope_audits_total", "audits stored", registry=r)
        self.verdicts = Counter(
            "mnemoscope_verdicts_total",
            "audits stored, by where the answer came from and by the rule's memory flag",
            ["source", "memory_flag"],
            registry=r,
        )
        self.rejected = Counter("mnemoscope_rejected_total", "audits not run", ["reason"], registry=r)
        self.latency = Histogram(
            "mnemoscope_audit_latency_seconds",
            "enqueue to scored, per audit",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64),
            registry=r,
        )
        self.batch = Histogram(
            "mnemoscope_batch_size", "audits per model batch", buckets=(1, 2, 4, 8, 16, 32, 64), registry=r
        )
        self.queue = Gauge("mnemoscope_queue_depth", "audits waiting", registry=r)
        self.http = Counter(
            "mnemoscope_http_requests_total", "HTTP requests", ["method", "route", "status"], registry=r
        )
        for src in SOURCES:  # every series exists from the start (rate() needs a first sample)
            for flag in ("true", "false"):
                self.verdicts.labels(src, flag)

    def stored(self, record: dict[str, Any]) -> None:
        """Count one durably stored audit record."""
        self.audits.inc()
        src = str(record.get("source") or "undetermined")
        self.verdicts.labels(src, "true" if record.get("memory_flag") else "false").inc()
        if record.get("latency_ms") is not None:
            self.latency.observe(float(record["latency_ms"]) / 1000.0)

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return bytes(generate_latest(self.registry))
