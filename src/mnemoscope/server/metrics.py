"""Prometheus metrics of one app instance (its own registry, served at ``/metrics``).

Verdicts are counted as the audit decided them: ``mnemoscope_verdicts_total`` by ``source``
(context | memory | mixed | undetermined | unsupported) and ``memory_flag`` (the rule's flag, the one the
profile's guarantee is about). CRM's LTS anomaly rule is not counted (it is secondary, see
``crm`` in each audit).

:class:`DriftWatch` holds the service's drift monitor (:mod:`mnemoscope.stats.drift`: the live
answers against the profile's calibration answers, every 50 answers a permutation test of the
last 200) or the reason drift is not watched, and exports it as ``mnemoscope_drift_*`` series
(docs/server.md#drift);
``serve`` and the proxy (``/mnemoscope/metrics``) each keep one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from mnemoscope.stats.drift import DEFAULT_ALPHA, DEFAULT_WINDOW, DriftMonitor

__all__ = ["SOURCES", "DriftWatch", "ServerMetrics"]

SOURCES = ("context", "memory", "mixed", "undetermined", "unsupported")


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
        self.drift = DriftWatch()
        r.register(self.drift)
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
        self.drift.record(record)

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return bytes(generate_latest(self.registry))


class DriftWatch:
    """The drift monitor of one service, or why there is none (a Prometheus collector too).

    Until :meth:`watch` is called (the profile is loaded) or when the profile holds no reference
    sample, ``reason`` says why drift is not watched and every surface shows it; no p-value is
    ever exported for a window that is not complete.
    """

    def __init__(self) -> None:
        self.monitor: DriftMonitor | None = None
        self.reason = "no profile loaded yet: drift not watched"
        self._lock = threading.Lock()

    def watch(
        self,
        profile: Any,
        *,
        window: int = DEFAULT_WINDOW,
        alpha: float = DEFAULT_ALPHA,
        step: int | None = None,
        first_test: int | None = None,
    ) -> None:
        """Start watching against ``profile``'s reference sample, or record why not (``window``,
        ``alpha``, ``step``, ``first_test``: :class:`~mnemoscope.stats.drift.DriftMonitor`'s)."""
        from mnemoscope.errors import InputError
        from mnemoscope.server.profile_view import drift_reference

        try:
            ref = drift_reference(profile)
        except InputError as e:
            with self._lock:
                self.monitor, self.reason = None, e.reason
            return
        with self._lock:
            self.monitor = DriftMonitor(ref, window=window, alpha=alpha, step=step, first_test=first_test)
            self.reason = ""

    def record(self, record: dict[str, Any]) -> None:
        """Feed one stored audit record (ignored when drift is not watched)."""
        mon = self.monitor
        if mon is not None:
            mon.observe_record(record)

    def status(self) -> dict[str, Any]:
        """The monitor's :meth:`~mnemoscope.stats.drift.DriftMonitor.status`, or
        ``{"watched": False, "state": "not watched", "reason": ...}``."""
        mon = self.monitor
        if mon is None:
            return {"watched": False, "state": "not watched", "reason": self.reason}
        return mon.status()

    def describe(self) -> list[Any]:
        return []  # unchecked collector: its series vary with the state

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        st = self.status()
        watched = GaugeMetricFamily(
            "mnemoscope_drift_watched",
            "1 when the live answers are compared with the profile's reference sample (0: see reason)",
            labels=["reason"],
        )
        watched.add_metric([st.get("reason", "")], 1.0 if st["watched"] else 0.0)
        yield watched
        state = GaugeMetricFamily(
            "mnemoscope_drift_state", "the drift watch's state (1 for the current one)", labels=["state"]
        )
        for s in ("not watched", "not enough answers yet", "no drift", "drift"):
            state.add_metric([s], 1.0 if st["state"] == s else 0.0)
        yield state
        if not st["watched"]:
            return
        yield GaugeMetricFamily(
            "mnemoscope_drift_window_size", "the most recent answers one test compares", value=st["window"]
        )
        yield GaugeMetricFamily("mnemoscope_drift_step", "answers between two tests", value=st["step"])
        yield GaugeMetricFamily(
            "mnemoscope_drift_alpha", "false-alarm probability of one test", value=st["alpha"]
        )
        yield GaugeMetricFamily(
            "mnemoscope_drift_window_answers",
            "answers since the last test (before the first: answers so far)",
            value=st["current"]["n"],
        )
        yield GaugeMetricFamily(
            "mnemoscope_drift_reference_answers",
            "answers in the reference sample",
            value=st["reference"]["n"],
        )
        yield CounterMetricFamily("mnemoscope_drift_windows", "tests run", value=st["n_windows"])
        yield CounterMetricFamily("mnemoscope_drift_alarms", "tests that fired", value=st["n_alarms"])
        last = st["last"]
        if last is None:
            return  # not enough answers yet: no p-value
        yield GaugeMetricFamily(
            "mnemoscope_drift_alarm",
            "1 when the last test fired",
            value=1.0 if last["drifted"] else 0.0,
        )
        yield GaugeMetricFamily(
            "mnemoscope_drift_window_last_answer", "index of the last answer of the last tested window",
            value=last["answers"][1],
        )  # fmt: skip
        if last["p_value"] is not None:  # None: no test of the window had enough values
            yield GaugeMetricFamily(
                "mnemoscope_drift_window_p_value",
                "the last test's p-value (permutation p-value; ks-bonferroni: the Bonferroni-adjusted smallest)",
                value=last["p_value"],
            )
        stat = GaugeMetricFamily(
            "mnemoscope_drift_statistic",
            "the last test's statistic per coordinate (Anderson-Darling A², or KS D for ks-bonferroni; "
            "flag rate: window minus reference)",
            labels=["test"],
        )
        pv = GaugeMetricFamily(
            "mnemoscope_drift_p_value",
            "the last test's p-value per coordinate, that coordinate alone (not the decision)",
            labels=["test"],
        )
        for t in last["tests"]:
            if t["p_value"] is not None:  # a test with too few values has no p-value
                stat.add_metric([t["name"]], t["statistic"])
                pv.add_metric([t["name"]], t["p_value"])
        yield stat
        yield pv
