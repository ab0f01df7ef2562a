"""``POST /v1/audit`` and ``POST /v1/audit/batch``: queue, audit, store, answer."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException
from fastapi.responses import JSONResponse

from mnemoscope.audit.auditor import AuditFailure, AuditRequest
from mnemoscope.server.batcher import QueueFull, ShuttingDown
from mnemoscope.server.config import ServerSettings
from mnemoscope.server.deps import AUDIT_ERRORS, KEY_REQUIRED, Ready, Running
from mnemoscope.server.records import Job, present
from mnemoscope.server.schemas import AuditIn, AuditOut, BatchIn, BatchOut
from mnemoscope.server.storage import StorageError

__all__ = ["router"]

router = APIRouter(dependencies=KEY_REQUIRED, responses=AUDIT_ERRORS, tags=["audit"])


def job_of(item: AuditIn, settings: ServerSettings) -> Job:
    """The queued job of one request body (422 when it asks for more tokens than allowed)."""
    opts = item.options
    T = None if opts is None else opts.max_new_tokens
    if T is not None and settings.max_new_tokens_limit < T:
        raise HTTPException(
            422, f"options.max_new_tokens is {T}; the limit is {settings.max_new_tokens_limit}"
        )
    if item.passages is not None:  # checked by AuditIn (exactly one of context and passages)
        req = AuditRequest.from_passages(item.passages, item.query, answer=item.answer, max_new_tokens=T)
    else:
        req = AuditRequest(item.context or "", item.query, answer=item.answer, max_new_tokens=T)
    return Job(
        req,
        True if opts is None else opts.return_generation,
    )


async def run_jobs(items: list[AuditIn], run: Running) -> list[Any]:
    """Submit the items as one admission to the batcher; map its refusals to HTTP answers."""
    settings, metrics = run.settings, run.metrics
    jobs = [job_of(it, settings) for it in items]
    retry = {"Retry-After": str(settings.retry_after_s)}
    try:
        return await run.batcher.submit(jobs, timeout=settings.request_timeout_s)
    except QueueFull as e:
        metrics.rejected.labels("queue_full").inc(len(jobs))
        raise HTTPException(503, str(e), headers=retry) from None
    except ShuttingDown as e:
        metrics.rejected.labels("shutdown").inc(len(jobs))
        raise HTTPException(503, str(e), headers=retry) from None
    except TimeoutError as e:
        metrics.rejected.labels("timeout").inc(len(jobs))
        raise HTTPException(504, str(e)) from None
    except StorageError as e:
        metrics.rejected.labels("storage").inc(len(jobs))
        raise HTTPException(
            503, f"the audit could not be stored: {e}", headers={"Retry-After": "5"}
        ) from None


@router.post("/v1/audit", response_model=AuditOut, response_model_exclude_unset=True)
async def audit(item: AuditIn, run: Ready) -> Any:
    """Audit one (context or passages, query): where the answer came from (source, memory_flag, p_memory,
    evidence, guarantee, token spans; CRM under ``crm``). With ``answer`` the given answer is
    scored instead of generating one. Stored before it returns."""
    (res,) = await run_jobs([item], run)
    if isinstance(res, AuditFailure):
        return JSONResponse(status_code=res.status, content={"detail": res.message, "field": res.field})
    return present(res, legacy=run.settings.legacy_crm_fields)


@router.post("/v1/audit/batch", response_model=BatchOut, response_model_exclude_unset=True)
async def audit_batch(body: BatchIn, run: Ready) -> Any:
    """Audit up to the server's batch limit in one request; a bad item does not fail the others."""
    limit = run.settings.max_batch_request
    if len(body.items) > limit:
        raise HTTPException(413, f"{len(body.items)} items; the batch limit is {limit}")
    res = await run_jobs(body.items, run)
    out: list[dict[str, Any]] = []
    for i, r in enumerate(res):
        if isinstance(r, AuditFailure):
            err = {"detail": r.message, "field": r.field, "index": i}
            out.append({"ok": False, "status": r.status, "audit": None, "error": err})
        else:
            audit = present(r, legacy=run.settings.legacy_crm_fields)
            out.append({"ok": True, "status": 200, "audit": audit, "error": None})
    return {"items": out}
