"""The FastAPI app: ``create_app(settings)`` builds it; the model is loaded in the lifespan.

Endpoints (OpenAPI at ``/openapi.json``, docs at ``/docs``), one router each
(:mod:`mnemoscope.server.routes`):

* ``POST /v1/audit``, ``POST /v1/audit/batch``: audits (API key required);
* ``GET /v1/audits/{id}``, ``GET /v1/history``, ``GET /v1/log/head``: the log (API key required);
* ``GET /v1/stats``, ``GET /v1/profile``: the service and its profile (API key required);
* ``GET /health`` (liveness), ``GET /ready`` (model and store loaded), ``GET /metrics``
  (Prometheus text format): open;
* ``GET /`` (the dashboard) and ``GET /profile`` (the profile's card): static pages that call the API.

State lives in one :class:`~mnemoscope.server.deps.ServerState` on ``app.state.mnemoscope``;
routers get what they need through the dependencies of :mod:`mnemoscope.server.deps`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from mnemoscope.audit.auditor import Auditor
from mnemoscope.server import middleware
from mnemoscope.server.batcher import Batcher
from mnemoscope.server.config import ServerSettings
from mnemoscope.server.deps import ServerState
from mnemoscope.server.metrics import ServerMetrics
from mnemoscope.server.records import Job, process_batch
from mnemoscope.server.routes import audit, dashboard, health, proofs, reading, stats
from mnemoscope.server.storage import AuditStore, open_store

__all__ = ["API_VERSION", "create_app", "load_engine"]

log = logging.getLogger(__name__)

API_VERSION = "v1"


def create_app(
    settings: ServerSettings,
    *,
    engine: Auditor | None = None,
    store: AuditStore | None = None,
) -> FastAPI:
    """Build the app. ``engine``/``store`` may be injected (tests, ``serve --endpoint``);
    otherwise the lifespan loads the model and profile named in ``settings`` and opens ``settings.db``.

    Raises:
        InputError: no API key configured and ``allow_anonymous`` off.

    At start-up (lifespan) it also refuses a profile for another model and a database held by
    another server.
    """
    if not settings.api_key_hashes and not settings.allow_anonymous:
        from mnemoscope.errors import InputError

        raise InputError(
            "no API key configured: set MNEMOSCOPE_API_KEYS=key1,key2 (or api_key_hashes in the config file); "
            "--allow-anonymous turns authentication off explicitly"
        )
    state = ServerState(settings=settings, metrics=ServerMetrics(), engine=engine, store=store)

    app = FastAPI(
        title="mnemoscope audit server",
        version="1.1",
        description="Is the model answering from memory or from the context it was given? Each audit "
        "returns where the answer came from (source, memory_flag, p_memory) with its evidence and the "
        "profile's guarantee, and is stored in a tamper-evident log.",
        lifespan=lambda app: _lifespan(state),
    )
    app.state.mnemoscope = state
    middleware.install(app, state.metrics, max_body_bytes=settings.max_body_bytes)
    for r in (audit.router, reading.router, proofs.router, stats.router, health.router, dashboard.router):
        app.include_router(r)
    app.mount("/static", StaticFiles(directory=str(dashboard.STATIC)), name="static")
    return app


@contextlib.asynccontextmanager
async def _lifespan(state: ServerState) -> AsyncIterator[None]:
    settings, metrics = state.settings, state.metrics
    if state.engine is None:
        state.engine = await asyncio.get_running_loop().run_in_executor(None, load_engine, settings)
    if state.store is None:
        state.store = open_store(
            settings.db, checkpoint_every=settings.checkpoint_every, signing_key=settings.log_key
        )
    engine, store = state.engine, state.store
    await asyncio.to_thread(metrics.drift.watch, engine.profile)  # the live answers vs the calibration's

    def process(jobs: list[Job], enqueued: list[float]) -> list[Any]:
        return process_batch(engine, store, metrics, jobs, enqueued, store_inputs=settings.store_inputs)

    batcher = Batcher(
        process,
        max_batch_size=settings.max_batch_size,
        max_wait_ms=settings.max_wait_ms,
        queue_size=settings.queue_size,
        on_batch=metrics.batch.observe,
    )
    await batcher.start()
    state.batcher = batcher
    state.ready = True
    retention = asyncio.create_task(_retention_loop(store, settings)) if settings.retention_days else None
    log.info("audit server ready: model %s, profile %s", engine.model_info.get("name"), engine.profile.path)
    try:
        yield
    finally:
        state.ready = False
        if retention is not None:
            retention.cancel()
        rejected = await batcher.stop(settings.shutdown_grace_s)
        if rejected:
            metrics.rejected.labels("shutdown").inc(rejected)
            log.warning("shutdown: %d queued audits rejected", rejected)
        with contextlib.suppress(Exception):
            store.checkpoint()
        store.close()


def load_engine(settings: ServerSettings) -> Auditor:
    """The model and profile named in ``settings`` as an :class:`Auditor` (refuses a profile of another model)."""
    import torch

    from mnemoscope.integrations import otel
    from mnemoscope.models import load_model

    otel.install()  # audit spans when OTEL_EXPORTER_OTLP_* is set; nothing otherwise
    if settings.threads:
        torch.set_num_threads(settings.threads)
    lm = load_model(settings.model, adapter=settings.adapter, device=settings.device, dtype=settings.dtype)
    return Auditor.for_model(
        lm,
        settings.profile,
        rule=settings.rule,  # type: ignore[arg-type]
        max_context_tokens=settings.max_context_tokens,
        max_query_tokens=settings.max_query_tokens,
        max_answer_tokens=settings.max_answer_tokens,
        batch_size=settings.max_batch_size,
    )


async def _retention_loop(store: AuditStore, settings: ServerSettings) -> None:
    assert settings.retention_days is not None
    while True:
        cutoff = time.time() - settings.retention_days * 86400
        try:
            n = await asyncio.to_thread(store.prune, cutoff)
            if n:
                log.info(
                    "retention: pruned the content of %d audits older than %.1f days",
                    n,
                    settings.retention_days,
                )
        except Exception:
            log.exception("retention pass failed")
        await asyncio.sleep(3600)
