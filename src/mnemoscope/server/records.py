"""Record shaping: an :class:`AuditResult` becomes the stored (hashed) record and the returned body.

The stored record is the pipeline's ``to_dict()`` (``source``, ``p_memory``, ``memory_flag``,
the answer, evidence, guarantee, tokens, spans, ``repcs``, ``crm``) plus what the server
knows (``id``, ``created_at``, ``latency_ms``, ``model``, ``profile_hash``, the inputs when
``store_inputs``). CRM's numbers live under ``crm`` only.

Compatibility: servers before this layout repeated CRM's fields at the top level
(``anomaly_flag``, ``anomaly_score``, ``lts_trajectory``, ``lts_z``, ``layers``,
``flagged_layers``, ``crm_probability``) and the answer as ``generation``. With the setting
``legacy_crm_fields = true`` every response carries them again (derived from ``crm`` when the
body is returned, never stored); with it off they are removed, also from records stored by an
older server.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mnemoscope.audit.auditor import AuditFailure, Auditor, AuditRequest, AuditResult
from mnemoscope.server.ledger import new_audit_id
from mnemoscope.server.metrics import ServerMetrics
from mnemoscope.server.storage import AuditStore

__all__ = ["LEGACY_CRM_FIELDS", "Job", "audit_record", "present", "process_batch", "with_legacy_fields"]

#: top-level copies of CRM's fields (and ``generation``) that older servers returned
LEGACY_CRM_FIELDS = (
    "anomaly_flag",
    "anomaly_score",
    "lts_trajectory",
    "lts_z",
    "layers",
    "flagged_layers",
    "crm_probability",
    "generation",
)


@dataclass(frozen=True)
class Job:
    """One queued audit: the pipeline request and what the HTTP caller wants back."""

    request: AuditRequest
    return_generation: bool = True


def audit_record(res: AuditResult, *, return_generation: bool = True) -> dict[str, Any]:
    """The pipeline's fields of one audit; without the answer and its tokens when
    ``return_generation`` is false (said in ``notes``)."""
    d = res.to_dict()
    if not return_generation:
        d.update(answer=None, tokens=[], spans=[])
        d["notes"] = [*d["notes"], "return_generation=false: the answer and its tokens are not returned"]
    return d


def with_legacy_fields(rec: dict[str, Any]) -> dict[str, Any]:
    """``rec`` plus the top-level CRM fields of older servers, read from ``rec["crm"]``."""
    crm = rec.get("crm") or {}
    return {
        **rec,
        "anomaly_flag": bool(crm.get("anomaly_flag", False)),
        "anomaly_score": crm.get("anomaly_score"),
        "lts_trajectory": crm.get("lts_trajectory", []),
        "lts_z": crm.get("lts_z", []),
        "layers": crm.get("layers", []),
        "flagged_layers": crm.get("flagged_layers", []),
        "crm_probability": crm.get("crm_probability"),
        "generation": rec.get("answer"),
    }


def present(rec: dict[str, Any], *, legacy: bool) -> dict[str, Any]:
    """A stored record as the API returns it (see the module doc for ``legacy``).

    A record stored before ``memory_flag`` was recorded shows it as ``null`` (not re-decided
    here: the flag is the pipeline's); a pruned record stays a stub.
    """
    if rec.get("pruned"):
        return rec
    out = {k: v for k, v in rec.items() if k not in LEGACY_CRM_FIELDS}
    out.setdefault("memory_flag", None)
    return with_legacy_fields(out) if legacy else out


def process_batch(
    engine: Auditor,
    store: AuditStore,
    metrics: ServerMetrics,
    jobs: Sequence[Job],
    enqueued: Sequence[float],
    *,
    store_inputs: bool,
) -> list[dict[str, Any] | AuditFailure]:
    """Worker-thread body: audit a batch, store the successes in one transaction, return results.

    Raises:
        StorageError: the records could not be stored (nobody is answered with an unstored audit).
    """
    results = engine.audit([j.request for j in jobs])
    now = time.time()
    done = time.perf_counter()
    records: list[dict[str, Any]] = []
    out: list[dict[str, Any] | AuditFailure] = []
    model = {
        k: engine.model_info.get(k) for k in ("name", "fingerprint", "architecture", "n_layers", "adapter")
    }
    for job, res, t0 in zip(jobs, results, enqueued, strict=True):
        if isinstance(res, AuditFailure):
            metrics.rejected.labels(f"http_{res.status}").inc()
            out.append(res)
            continue
        rec: dict[str, Any] = {
            "id": new_audit_id(),
            "created_at": now,
            **audit_record(res, return_generation=job.return_generation),
            "answer_given": job.request.answer is not None,
            "latency_ms": (done - t0) * 1000.0,
            "model": model,
            "profile_hash": engine.profile.content_hash,
        }
        if store_inputs:
            rec["context"] = job.request.context
            rec["query"] = job.request.query
        records.append(rec)
        out.append(rec)
    seqs = store.append(records)  # durable before anyone is answered; raises StorageError
    for rec, seq in zip(records, seqs, strict=True):
        rec["seq"] = seq
        metrics.stored(rec)
    return out
