"""Open operational endpoints: liveness, readiness, Prometheus metrics."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from mnemoscope.server.deps import Settings, State

__all__ = ["router"]

router = APIRouter(tags=["operations"])


@router.get("/health")
async def health(settings: Settings) -> Any:
    """Liveness: the process answers. ``auth`` is ``"bearer"`` (an API key is needed for ``/v1``)
    or ``"none"`` (started with ``--allow-anonymous`` and no keys)."""
    anonymous = settings.allow_anonymous and not settings.api_key_hashes
    return {"status": "ok", "auth": "none" if anonymous else "bearer"}


@router.get("/ready", responses={503: {"description": "starting, stopping, or database unavailable"}})
async def ready(state: State) -> Any:
    """Readiness: model loaded and database reachable."""
    run = state.running()
    if run is None:
        return JSONResponse(status_code=503, content={"status": "starting", "ready": False})
    try:
        await asyncio.to_thread(run.store.ping)
    except Exception as e:
        return JSONResponse(status_code=503, content={"status": f"database unavailable: {e}", "ready": False})
    return {"status": "ready", "ready": True, "model": run.engine.model_info.get("name")}


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(state: State) -> Response:
    """Prometheus text format (see docs/server.md for the series)."""
    from prometheus_client import CONTENT_TYPE_LATEST

    if state.batcher is not None:
        state.metrics.queue.set(state.batcher.depth)
    return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
