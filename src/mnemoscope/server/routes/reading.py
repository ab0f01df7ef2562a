"""Reading the log: one audit, the history (filtered, paged), the chain head."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, HTTPException, Query

from mnemoscope.server.deps import KEY_REQUIRED, READ_ERRORS, Settings, Store
from mnemoscope.server.records import present
from mnemoscope.server.schemas import AuditOut, ErrorOut, HistoryOut

__all__ = ["router"]

router = APIRouter(dependencies=KEY_REQUIRED, responses=READ_ERRORS, tags=["log"])


@router.get(
    "/v1/audits/{audit_id}",
    response_model=AuditOut,
    response_model_exclude_unset=True,
    responses={
        404: {"model": ErrorOut, "description": "no audit with this id"},
        410: {"model": ErrorOut, "description": "pruned by the retention policy (its hash remains)"},
    },
)
async def get_audit(audit_id: str, store: Store, settings: Settings) -> Any:
    """One stored audit by id."""
    rec = await asyncio.to_thread(store.get, audit_id)
    if rec is None:
        raise HTTPException(404, f"no audit with id {audit_id!r}")
    if rec.get("pruned"):
        raise HTTPException(410, f"audit {audit_id!r} was pruned by the retention policy (its hash remains)")
    return present(rec, legacy=settings.legacy_crm_fields)


@router.get("/v1/history", response_model=HistoryOut)
async def history(
    store: Store,
    settings: Settings,
    limit: int = Query(50, ge=1, le=500),
    offset: int = Query(0, ge=0, le=10**9),
    flag: bool | None = Query(None, description="only anomalous (true) or normal (false) audits"),
    since: float | None = Query(None, ge=0, le=1e11, description="epoch seconds, inclusive"),
    until: float | None = Query(None, ge=0, le=1e11, description="epoch seconds, inclusive"),
) -> Any:
    """Stored audits, newest first."""
    items, total = await asyncio.to_thread(
        store.history, limit=limit, offset=offset, flag=flag, since=since, until=until
    )
    items = [present(it, legacy=settings.legacy_crm_fields) for it in items]
    return {"items": items, "total": total, "limit": limit, "offset": offset}


@router.get("/v1/log/head")
async def log_head(store: Store) -> Any:
    """The chain head and the last Merkle checkpoint: publish them elsewhere to anchor the log."""
    return await asyncio.to_thread(store.head)
