"""The server's state and the FastAPI dependencies every router uses.

``create_app`` puts one :class:`ServerState` on ``app.state.mnemoscope``; routers never reach
into it directly but declare what they need:

* ``require_key`` (in ``dependencies=KEY_REQUIRED``): the Bearer API key check;
* :data:`Ready`: the loaded :class:`Running` view (503 with ``Retry-After`` while starting or
  stopping);
* :data:`Store`, :data:`Engine`, :data:`Settings`, :data:`Metrics`: one piece each.

A new router is one module with an ``APIRouter`` and one line in :mod:`mnemoscope.server.app`::

    from mnemoscope.server.deps import KEY_REQUIRED, READ_ERRORS, Store

    router = APIRouter(dependencies=KEY_REQUIRED, responses=READ_ERRORS)

    @router.get("/v1/log/consistency")
    async def consistency(store: Store, first: int, second: int) -> Any:
        return await asyncio.to_thread(store.consistency, first, second)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request

from mnemoscope.audit.auditor import Auditor
from mnemoscope.server.batcher import Batcher
from mnemoscope.server.config import ServerSettings
from mnemoscope.server.metrics import ServerMetrics
from mnemoscope.server.schemas import ErrorOut, ValidationErrorOut
from mnemoscope.server.storage import AuditStore

__all__ = [
    "AUDIT_ERRORS",
    "KEY_REQUIRED",
    "READ_ERRORS",
    "Engine",
    "Metrics",
    "Ready",
    "Running",
    "ServerState",
    "Settings",
    "State",
    "Store",
    "get_engine",
    "get_metrics",
    "get_running",
    "get_settings",
    "get_state",
    "get_store",
    "require_key",
]

# Documented error answers (OpenAPI); every error body has a "detail" string.
READ_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorOut, "description": "the body could not be parsed (e.g. not UTF-8)"},
    401: {"model": ErrorOut, "description": "no API key, or not 'Authorization: Bearer <key>'"},
    403: {"model": ErrorOut, "description": "the API key is not valid for this server"},
    422: {"model": ValidationErrorOut, "description": "invalid parameters or body"},
    503: {"model": ErrorOut, "description": "starting or stopping (Retry-After)"},
}
AUDIT_ERRORS: dict[int | str, dict[str, Any]] = {
    **READ_ERRORS,
    413: {"model": ErrorOut, "description": "body over the byte limit, or too many tokens or items"},
    503: {"model": ErrorOut, "description": "queue full, stopping, or not stored (Retry-After)"},
    504: {"model": ErrorOut, "description": "not audited within the request timeout"},
}


@dataclass
class ServerState:
    """Everything one app instance holds. ``engine``/``store``/``batcher`` are set by the
    lifespan (or injected) and stay ``None`` until then; ``ready`` is true between start-up
    and the beginning of shutdown."""

    settings: ServerSettings
    metrics: ServerMetrics
    engine: Auditor | None = None
    store: AuditStore | None = None
    batcher: Batcher | None = None
    ready: bool = False
    started: float = field(default_factory=time.time)

    def running(self) -> Running | None:
        """The loaded view, or ``None`` while starting or stopping."""
        if not self.ready or self.engine is None or self.store is None or self.batcher is None:
            return None
        return Running(self.settings, self.metrics, self.engine, self.store, self.batcher, self.started)


@dataclass(frozen=True)
class Running:
    """The state of a started server: nothing here is ``None``."""

    settings: ServerSettings
    metrics: ServerMetrics
    engine: Auditor
    store: AuditStore
    batcher: Batcher
    started: float


def get_state(request: Request) -> ServerState:
    state = request.app.state.mnemoscope
    assert isinstance(state, ServerState), "create_app() did not set app.state.mnemoscope"
    return state


State = Annotated[ServerState, Depends(get_state)]


def get_settings(state: State) -> ServerSettings:
    return state.settings


def get_metrics(state: State) -> ServerMetrics:
    return state.metrics


def get_running(state: State) -> Running:
    run = state.running()
    if run is None:
        raise HTTPException(503, "the server is starting or stopping", headers={"Retry-After": "1"})
    return run


Settings = Annotated[ServerSettings, Depends(get_settings)]
Metrics = Annotated[ServerMetrics, Depends(get_metrics)]
Ready = Annotated[Running, Depends(get_running)]


def get_store(run: Ready) -> AuditStore:
    return run.store


def get_engine(run: Ready) -> Auditor:
    return run.engine


Store = Annotated[AuditStore, Depends(get_store)]
Engine = Annotated[Auditor, Depends(get_engine)]


def require_key(request: Request, settings: Settings) -> None:
    """The API key check: ``Authorization: Bearer <key>`` (nothing with ``allow_anonymous`` and no keys)."""
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


KEY_REQUIRED = [Depends(require_key)]
