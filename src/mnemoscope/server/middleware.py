"""Cross-cutting HTTP behaviour: the body-size limit, request counting, and one shape for 422s."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from mnemoscope.server.metrics import ServerMetrics

__all__ = ["BodyLimit", "install"]


class BodyLimit:
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


def validation_errors(errs: Any) -> list[dict[str, Any]]:
    """Up to 10 validation problems as plain JSON (the raw ones may hold non-serialisable input)."""
    return [
        {"loc": [str(x) for x in e.get("loc", ())], "msg": str(e.get("msg")), "type": str(e.get("type"))}
        for e in errs[:10]
    ]


async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    """Every 422: the first problem in ``detail`` (with its field), all of them in ``errors``."""
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
                "errors": validation_errors(errs),
            },
        )
    return JSONResponse(
        status_code=422,
        content={
            "detail": f"{loc or 'request'}: {first.get('msg')}",
            "field": loc or None,
            "errors": validation_errors(errs),
        },
    )


def install(app: FastAPI, metrics: ServerMetrics, *, max_body_bytes: int) -> None:
    """Add the request counter, the body limit and the 422 handler to ``app``."""

    @app.middleware("http")
    async def count(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        resp = await call_next(request)
        route = request.scope.get("route")
        metrics.http.labels(request.method, getattr(route, "path", "unmatched"), str(resp.status_code)).inc()
        return resp

    app.add_middleware(BodyLimit, limit=max_body_bytes)
    app.add_exception_handler(RequestValidationError, invalid_request)  # type: ignore[arg-type]
