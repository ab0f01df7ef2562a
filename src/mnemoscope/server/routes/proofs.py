"""Proofs from the log (RFC 9162): an audit's inclusion proof and a consistency proof between
two tree sizes, each anchored in a signed checkpoint (C2SP note) that a third party checks
with the log's public key alone (``mnemoscope log check-proof FILE --key KEY``)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query

from mnemoscope.server.deps import KEY_REQUIRED, READ_ERRORS, Store
from mnemoscope.server.schemas import ErrorOut
from mnemoscope.server.storage import ProofUnavailable, StorageError

__all__ = ["router"]

router = APIRouter(dependencies=KEY_REQUIRED, responses=READ_ERRORS, tags=["log"])


def _unavailable(e: StorageError) -> HTTPException:
    if isinstance(e, ProofUnavailable):
        return HTTPException(404, str(e))
    return HTTPException(503, f"the log is unavailable: {e}", headers={"Retry-After": "5"})


@router.get(
    "/v1/audits/{audit_id}/proof",
    responses={404: {"model": ErrorOut, "description": "no audit with this id"}},
)
async def inclusion_proof(audit_id: str, store: Store) -> Any:
    """The audit's RFC 9162 inclusion proof against the latest signed checkpoint (one is written
    first if none covers the audit yet): ``checkpoint`` (signed note), ``leaf_index``,
    ``tree_size``, ``leaf_hash``, ``inclusion_path`` (base64) and the ``record``."""
    try:
        return await asyncio.to_thread(store.prove, audit_id)
    except StorageError as e:
        raise _unavailable(e) from None


@router.get(
    "/v1/log/consistency",
    responses={404: {"model": ErrorOut, "description": "a size outside the log"}},
)
async def consistency_proof(
    store: Store,
    first: Annotated[int, Query(alias="from", ge=1, le=2**62, description="the older tree size")],
    second: Annotated[
        int | None,
        Query(alias="to", ge=1, le=2**62, description="the newer tree size (default: latest checkpoint)"),
    ] = None,
) -> Any:
    """RFC 9162 consistency proof that the log at size ``from`` is a prefix of the log at size ``to``,
    with both roots and the signed checkpoints at those sizes when there are any."""
    try:
        return await asyncio.to_thread(store.consistency, first, second)
    except StorageError as e:
        raise _unavailable(e) from None
