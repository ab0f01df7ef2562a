"""The FastAPI app: ``create_app(settings)`` builds it; the model is loaded in the lifespan.

Endpoints (OpenAPI at ``/openapi.json``, docs at ``/docs``):

* ``POST /v1/audit``, ``POST /v1/audit/batch``: audits (API key required);
* ``GET /v1/audits/{id}``, ``GET /v1/history``, ``GET /v1/stats``, ``GET /v1/log/head``:
  reading (API key required);
* ``GET /health`` (liveness), ``GET /ready`` (model and store loaded), ``GET /metrics``
  (Prometheus text format): open;
* ``GET /``: the dashboard (static files; it asks for a key and calls the API).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles

from mnemoscope.pipelines.audit import AuditFailure, Auditor, AuditRequest, AuditResult
from mnemoscope.server.batcher import Batcher, QueueFull, ShuttingDown
from mnemoscope.server.config import ServerSettings
from mnemoscope.server.schemas import (
    AuditIn,
    AuditOut,
    BatchIn,
    BatchOut,
    ErrorOut,
    HistoryOut,
    StatsOut,
    ValidationErrorOut,
)
from mnemoscope.server.storage import AuditStore, StorageError, open_store

__all__ = ["create_app"]

log = logging.getLogger(__name__)

API_VERSION = "v1"

# Documented error answers (OpenAPI); every error body has a "detail" string.
_READ_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorOut, "description": "the body could not be parsed (e.g. not UTF-8)"},
    401: {"model": ErrorOut, "description": "no API key, or not 'Authorization: Bearer <key>'"},
    403: {"model": ErrorOut, "description": "the API key is not valid for this server"},
    422: {"model": ValidationErrorOut, "description": "invalid parameters or body"},
    503: {"model": ErrorOut, "description": "starting or stopping (Retry-After)"},
}
_AUDIT_ERRORS: dict[int | str, dict[str, Any]] = {
    **_READ_ERRORS,
    413: {"model": ErrorOut, "description": "body over the byte limit, or too many tokens or items"},
    503: {"model": ErrorOut, "description": "queue full, stopping, or not stored (Retry-After)"},
    504: {"model": ErrorOut, "description": "not audited within the request timeout"},
}


class _Metrics:
    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        r = self.registry
        self.audits = Counter("mnemoscope_audits_total", "audits stored", registry=r)
        self.anomalies = Counter("mnemoscope_anomalies_total", "audits flagged anomalous", registry=r)
        self.memorized = Counter("mnemoscope_memorized_total", "audits RePCS flagged memorized", registry=r)
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


class _BodyLimit:
    """Pure ASGI middleware: reject bodies over ``limit`` bytes with 413 (also without Content-Length)."""

    def __init__(self, app: Any, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for k, v in scope.get("headers", []):
            if k == b"content-length" and v.isdigit() and int(v) > self.limit:
                await self._reject(send)
                return
        seen = 0
        rejected = False

        async def limited() -> Any:
            # Over the limit without a Content-Length (chunked): answer 413 ourselves and tell
            # the app the client went away; whatever it sends afterwards is dropped.
            nonlocal seen, rejected
            if rejected:
                return {"type": "http.disconnect"}
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    rejected = True
                    await self._reject(send)
                    return {"type": "http.disconnect"}
            return msg

        async def guarded_send(msg: Any) -> None:
            if not rejected:
                await send(msg)

        try:
            await self.app(scope, limited, guarded_send)
        except Exception:
            if not rejected:
                raise

    async def _reject(self, send: Any) -> None:
        body = f'{{"detail":"request body over the limit of {self.limit} bytes"}}'.encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "p99": None, "mean": None}
    import numpy as np

    a = np.asarray(values)
    return {
        "p50": float(np.percentile(a, 50)),
        "p95": float(np.percentile(a, 95)),
        "p99": float(np.percentile(a, 99)),
        "mean": float(a.mean()),
    }


def _ready_state(request: Request) -> dict[str, Any]:
    state: dict[str, Any] = request.app.state.mnemoscope
    if not state["ready"]:
        raise HTTPException(503, "the server is starting or stopping", headers={"Retry-After": "1"})
    return state


Ready = Annotated[dict[str, Any], Depends(_ready_state)]


def create_app(
    settings: ServerSettings,
    *,
    engine: Auditor | None = None,
    store: AuditStore | None = None,
) -> FastAPI:
    """Build the app. ``engine``/``store`` may be injected (tests); otherwise the lifespan
    loads the model and profile named in ``settings`` and opens ``settings.db``.

    Raises at start-up (lifespan): no API key configured and ``allow_anonymous`` off; a
    profile for another model; a database held by another server.
    """
    if not settings.api_key_hashes and not settings.allow_anonymous:
        from mnemoscope.errors import InputError

        raise InputError(
            "no API key configured: set MNEMOSCOPE_API_KEYS=key1,key2 (or api_key_hashes in the config file); "
            "--allow-anonymous turns authentication off explicitly"
        )
    metrics = _Metrics()
    state: dict[str, Any] = {"ready": False, "started": time.time()}

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        nonlocal engine, store
        if engine is None:
            engine = await asyncio.get_running_loop().run_in_executor(None, _load_engine, settings)
        if store is None:
            store = open_store(settings.db, checkpoint_every=settings.checkpoint_every)
        batcher = Batcher(
            lambda payloads, enq: _process(engine, store, settings, metrics, payloads, enq),  # type: ignore[arg-type]
            max_batch_size=settings.max_batch_size,
            max_wait_ms=settings.max_wait_ms,
            queue_size=settings.queue_size,
            on_batch=lambda n: metrics.batch.observe(n),
        )
        await batcher.start()
        state.update(engine=engine, store=store, batcher=batcher, ready=True)
        retention = asyncio.create_task(_retention_loop(store, settings)) if settings.retention_days else None
        log.info(
            "audit server ready: model %s, profile %s", engine.model_info.get("name"), engine.profile.path
        )
        try:
            yield
        finally:
            state["ready"] = False
            if retention is not None:
                retention.cancel()
            rejected = await batcher.stop(settings.shutdown_grace_s)
            if rejected:
                metrics.rejected.labels("shutdown").inc(rejected)
                log.warning("shutdown: %d queued audits rejected", rejected)
            with contextlib.suppress(Exception):
                store.checkpoint()
            store.close()

    app = FastAPI(
        title="mnemoscope audit server",
        version="1.0",
        description="Is the model answering from memory or from the context it was given? "
        "CRM latent trajectory shift + RePCS retrieval-path KL, with a tamper-evident audit log.",
        lifespan=lifespan,
    )

    app.state.mnemoscope = state

    @app.middleware("http")
    async def count(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        resp = await call_next(request)
        route = request.scope.get("route")
        metrics.http.labels(request.method, getattr(route, "path", "unmatched"), str(resp.status_code)).inc()
        return resp

    app.add_middleware(_BodyLimit, limit=settings.max_body_bytes)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errs = exc.errors()
        first: dict[str, Any] = dict(errs[0]) if errs else {"loc": (), "msg": "invalid request"}
        loc = ".".join(str(x) for x in first.get("loc", ()) if x != "body")
        if first.get("type") == "json_invalid":  # the location is a character offset, not a field
            err = (first.get("ctx") or {}).get("error", "")
            return JSONResponse(
                status_code=422,
                content={
                    "detail": f"the body is not valid JSON: {err}".rstrip(": "),
                    "field": None,
                    "errors": _safe(errs),
                },
            )
        return JSONResponse(
            status_code=422,
            content={
                "detail": f"{loc or 'request'}: {first.get('msg')}",
                "field": loc or None,
                "errors": _safe(errs),
            },
        )

    def require_key(request: Request) -> None:
        if settings.allow_anonymous and not settings.api_key_hashes:
            return
        auth = request.headers.get("authorization", "")
        if not auth:
            raise HTTPException(
                401,
                "missing API key: send 'Authorization: Bearer <key>'",
                headers={"WWW-Authenticate": "Bearer"},
            )
        scheme, _, key = auth.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise HTTPException(
                401,
                "malformed Authorization header: expected 'Bearer <key>'",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if not settings.check_key(key.strip()):
            raise HTTPException(403, "this API key is not valid for this server")

    def _request_of(item: AuditIn) -> _Job:
        opts = item.options
        T = None if opts is None else opts.max_new_tokens
        if T is not None and settings.max_new_tokens_limit < T:
            raise HTTPException(
                422, f"options.max_new_tokens is {T}; the limit is {settings.max_new_tokens_limit}"
            )
        return _Job(
            AuditRequest(item.context, item.query, max_new_tokens=T),
            True if opts is None else opts.return_generation,
        )

    async def _run(items: list[AuditIn], st: dict[str, Any]) -> list[Any]:
        reqs = [_request_of(it) for it in items]
        try:
            return await st["batcher"].submit(reqs, timeout=settings.request_timeout_s)
        except QueueFull as e:
            metrics.rejected.labels("queue_full").inc(len(reqs))
            raise HTTPException(503, str(e), headers={"Retry-After": str(settings.retry_after_s)}) from None
        except ShuttingDown as e:
            metrics.rejected.labels("shutdown").inc(len(reqs))
            raise HTTPException(503, str(e), headers={"Retry-After": str(settings.retry_after_s)}) from None
        except TimeoutError as e:
            metrics.rejected.labels("timeout").inc(len(reqs))
            raise HTTPException(504, str(e)) from None
        except StorageError as e:
            metrics.rejected.labels("storage").inc(len(reqs))
            raise HTTPException(
                503, f"the audit could not be stored: {e}", headers={"Retry-After": "5"}
            ) from None

    auth = [Depends(require_key)]

    @app.post(
        f"/{API_VERSION}/audit",
        response_model=AuditOut,
        dependencies=auth,
        responses=_AUDIT_ERRORS,
    )
    async def audit(item: AuditIn, st: Ready) -> Any:
        """Audit one (context, query): where the answer came from (source, p_memory, evidence, guarantee,
        token spans; CRM fields secondary). Stored before it returns."""
        (res,) = await _run([item], st)
        if isinstance(res, AuditFailure):
            return JSONResponse(status_code=res.status, content={"detail": res.message, "field": res.field})
        return res

    @app.post(
        f"/{API_VERSION}/audit/batch", response_model=BatchOut, dependencies=auth, responses=_AUDIT_ERRORS
    )
    async def audit_batch(body: BatchIn, st: Ready) -> Any:
        """Audit up to the server's batch limit in one request; a bad item does not fail the others."""
        if len(body.items) > settings.max_batch_request:
            raise HTTPException(
                413, f"{len(body.items)} items; the batch limit is {settings.max_batch_request}"
            )
        res = await _run(body.items, st)
        out = []
        for i, r in enumerate(res):
            if isinstance(r, AuditFailure):
                out.append(
                    {
                        "ok": False,
                        "status": r.status,
                        "error": {"detail": r.message, "field": r.field, "index": i},
                    }
                )
            else:
                out.append({"ok": True, "status": 200, "audit": r})
        return {"items": out}

    @app.get(
        f"/{API_VERSION}/audits/{{audit_id}}",
        response_model=AuditOut,
        dependencies=auth,
        responses={
            **_READ_ERRORS,
            404: {"model": ErrorOut, "description": "no audit with this id"},
            410: {"model": ErrorOut, "description": "pruned by the retention policy (its hash remains)"},
        },
    )
    async def get_audit(audit_id: str, st: Ready) -> Any:
        rec = await asyncio.to_thread(st["store"].get, audit_id)
        if rec is None:
            raise HTTPException(404, f"no audit with id {audit_id!r}")
        if rec.get("pruned"):
            raise HTTPException(
                410, f"audit {audit_id!r} was pruned by the retention policy (its hash remains)"
            )
        return rec

    @app.get(f"/{API_VERSION}/history", response_model=HistoryOut, dependencies=auth, responses=_READ_ERRORS)
    async def history(
        st: Ready,
        limit: int = Query(50, ge=1, le=500),
        offset: int = Query(0, ge=0, le=10**9),
        flag: bool | None = Query(None, description="only anomalous (true) or normal (false) audits"),
        since: float | None = Query(None, ge=0, le=1e11, description="epoch seconds, inclusive"),
        until: float | None = Query(None, ge=0, le=1e11, description="epoch seconds, inclusive"),
    ) -> Any:
        items, total = await asyncio.to_thread(
            st["store"].history, limit=limit, offset=offset, flag=flag, since=since, until=until
        )
        return {"items": items, "total": total, "limit": limit, "offset": offset}

    @app.get(f"/{API_VERSION}/stats", response_model=StatsOut, dependencies=auth, responses=_READ_ERRORS)
    async def stats(st: Ready) -> Any:
        c = await asyncio.to_thread(st["store"].counts)
        head = await asyncio.to_thread(st["store"].head)
        eng: Auditor = st["engine"]
        prof = eng.profile
        b: Batcher = st["batcher"]
        return {
            "model": eng.model_info,
            "profile": {
                "path": str(prof.path),
                "hash": prof.content_hash,
                "layers": [int(v) for v in prof.crm.layers],
                "anomaly": asdict(prof.anomaly),
                "repcs_tau": prof.repcs_tau if math.isfinite(prof.repcs_tau) else None,
                "verdict": None if prof.verdict is None else prof.verdict.to_dict(),
                "rule": eng.rule,
                "classifier": prof.crm.classifier,
                "max_new_tokens": prof.max_new_tokens,
            },
            "n_audits": c["n"],
            "n_anomalies": c["n_anomalies"],
            "anomaly_rate": (c["n_anomalies"] / c["n"]) if c["n"] else None,
            "n_memorized": c["n_memorized"],
            "latency_ms": _percentiles(c["recent_latency_ms"]),
            "queue": {
                "depth": b.depth,
                "in_flight": b.in_flight,
                "capacity": b.queue_size,
                "max_batch_size": b.max_batch_size,
                "max_wait_ms": b.max_wait_ms,
                "batches": b.n_batches,
            },
            "log_head": head,
            "uptime_s": time.time() - state["started"],
        }

    @app.get(f"/{API_VERSION}/log/head", dependencies=auth, responses=_READ_ERRORS)
    async def log_head(st: Ready) -> Any:
        """The chain head and the last Merkle checkpoint: publish them elsewhere to anchor the log."""
        return await asyncio.to_thread(st["store"].head)

    @app.get("/health")
    async def health() -> Any:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get("/ready", responses={503: {"description": "starting, stopping, or database unavailable"}})
    async def ready() -> Any:
        """Readiness: model loaded and database reachable."""
        if not state["ready"]:
            return JSONResponse(status_code=503, content={"status": "starting", "ready": False})
        try:
            await asyncio.to_thread(state["store"].ping)
        except Exception as e:
            return JSONResponse(
                status_code=503, content={"status": f"database unavailable: {e}", "ready": False}
            )
        return {"status": "ready", "ready": True, "model": state["engine"].model_info.get("name")}

    @app.get("/metrics", response_class=PlainTextResponse)
    async def prom() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        if state.get("batcher") is not None:
            metrics.queue.set(state["batcher"].depth)
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    static = resources.files("mnemoscope.server") / "static"

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def dashboard() -> Any:
        return HTMLResponse((static / "index.html").read_text(encoding="utf-8"))

    app.mount("/static", StaticFiles(directory=str(static)), name="static")
    return app


def _safe(errs: Any) -> list[dict[str, Any]]:
    out = []
    for e in errs[:10]:
        out.append(
            {"loc": [str(x) for x in e.get("loc", ())], "msg": str(e.get("msg")), "type": str(e.get("type"))}
        )
    return out


def _load_engine(settings: ServerSettings) -> Auditor:
    import torch

    from mnemoscope.integrations import otel
    from mnemoscope.models import load_model
    from mnemoscope.pipelines.profile import default_profile_path, load_profile

    otel.install()  # audit spans when OTEL_EXPORTER_OTLP_* is set; nothing otherwise
    if settings.threads:
        torch.set_num_threads(settings.threads)
    lm = load_model(settings.model, adapter=settings.adapter, device=settings.device, dtype=settings.dtype)
    profile = load_profile(settings.profile or default_profile_path(lm.info), model=lm.info)
    return Auditor(
        lm,
        profile,
        rule=settings.rule,  # type: ignore[arg-type]
        max_context_tokens=settings.max_context_tokens,
        max_query_tokens=settings.max_query_tokens,
        batch_size=settings.max_batch_size,
    )


@dataclass(frozen=True)
class _Job:
    """One queued audit: the pipeline request and what the HTTP caller wants back."""

    request: AuditRequest
    return_generation: bool = True


def audit_record(res: AuditResult, *, return_generation: bool = True) -> dict[str, Any]:
    """The stored and returned body of one audit: the pipeline's fields, plus the legacy CRM fields
    (``anomaly_flag`` & co., CRM's rule) and ``generation`` kept for compatibility."""
    d = res.to_dict()
    crm = d.get("crm") or {}
    d.update(
        anomaly_flag=bool(crm.get("anomaly_flag", False)),
        anomaly_score=crm.get("anomaly_score"),
        lts_trajectory=crm.get("lts_trajectory", []),
        lts_z=crm.get("lts_z", []),
        layers=crm.get("layers", []),
        flagged_layers=crm.get("flagged_layers", []),
        crm_probability=crm.get("crm_probability"),
        generation=d["answer"],
    )
    if not return_generation:
        d.update(answer=None, generation=None, tokens=[], spans=[])
        d["notes"] = [*d["notes"], "return_generation=false: the answer and its tokens are not returned"]
    return d


def _process(
    engine: Auditor,
    store: AuditStore,
    settings: ServerSettings,
    metrics: _Metrics,
    payloads: list[_Job],
    enqueued: list[float],
) -> list[Any]:
    """Worker-thread body: audit a batch, store the successes in one transaction, return results."""
    results = engine.audit([j.request for j in payloads])
    now = time.time()
    done = time.perf_counter()
    records: list[dict[str, Any]] = []
    out: list[Any] = []
    model = {
        k: engine.model_info.get(k) for k in ("name", "fingerprint", "architecture", "n_layers", "adapter")
    }
    for job, res, t0 in zip(payloads, results, enqueued, strict=True):
        if isinstance(res, AuditFailure):
            metrics.rejected.labels(f"http_{res.status}").inc()
            out.append(res)
            continue
        rec: dict[str, Any] = {
            "id": uuid.uuid4().hex,
            "created_at": now,
            **audit_record(res, return_generation=job.return_generation),
            "latency_ms": (done - t0) * 1000.0,
            "model": model,
            "profile_hash": engine.profile.content_hash,
        }
        if settings.store_inputs:
            rec["context"] = job.request.context
            rec["query"] = job.request.query
        records.append(rec)
        out.append(rec)
    seqs = store.append(records)  # durable before anyone is answered; raises StorageError
    for rec, seq in zip(records, seqs, strict=True):
        rec["seq"] = seq
        metrics.audits.inc()
        metrics.latency.observe(rec["latency_ms"] / 1000)
        if rec["anomaly_flag"]:
            metrics.anomalies.inc()
        if rec["source"] == "memory":
            metrics.memorized.inc()
    return out


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
