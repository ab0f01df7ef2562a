"""Reading the log: one audit, the history (filtered, paged), the chain head."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query

from mnemoscope.server.deps import KEY_REQUIRED, READ_ERRORS, Settings, Store
from mnemoscope.server.records import present
from mnemoscope.server.schemas import AuditOut, ErrorOut, HistoryOut

__all__ = ["router"]

Source = Literal["context", "memory", "mixed", "undetermined", "unsupported"]

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
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    before_seq: Annotated[
        int | None,
        Query(
            ge=1, le=2**62, description="keyset cursor: only audits with seq < before_seq (next_before_seq)"
        ),
    ] = None,
    source: Annotated[Source | None, Query(description="only answers from this source")] = None,
    memory_flag: Annotated[
        bool | None, Query(description="only audits the rule flagged (true) or not (false)")
    ] = None,
    flag: Annotated[
        bool | None,
        Query(deprecated=True, description="old name of memory_flag (before, it meant CRM's anomaly rule)"),
    ] = None,
    since: Annotated[float | None, Query(ge=0, le=1e11, description="epoch seconds, inclusive")] = None,
    until: Annotated[float | None, Query(ge=0, le=1e11, description="epoch seconds, inclusive")] = None,
    offset: Annotated[
        int | None,
        Query(
            ge=0, le=10**9, deprecated=True, description="removed (only 0 is accepted): page with before_seq"
        ),
    ] = None,
) -> Any:
    """Stored audits, newest first, one page at a time: pass ``next_before_seq`` back as
    ``before_seq`` for the next page (the same cost at any depth)."""
    if offset:
        raise HTTPException(
            422,
            "offset paging was replaced by keyset paging: pass the previous page's next_before_seq as before_seq",
        )
    if flag is not None and memory_flag is not None and flag != memory_flag:
        raise HTTPException(422, "flag is the old name of memory_flag: pass one of them")
    mf = memory_flag if memory_flag is not None else flag
    page = await asyncio.to_thread(
        store.history,
        limit=limit,
        before_seq=before_seq,
        source=source,
        memory_flag=mf,
        since=since,
        until=until,
    )
    items = [present(it, legacy=settings.legacy_crm_fields) for it in page.items]
    return {
        "items": items,
        "limit": limit,
        "next_before_seq": page.next_before_seq,
        "filters": {"source": source, "memory_flag": mf, "since": since, "until": until},
    }


@router.get("/v1/log/head")
async def log_head(store: Store) -> Any:
    """The chain head and the last Merkle checkpoint: publish them elsewhere to anchor the log."""
    return await asyncio.to_thread(store.head)
