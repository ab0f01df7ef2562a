"""The audit proxy: an OpenAI-compatible front that audits every answer of the server behind it.

A RAG application points its OpenAI client at the proxy instead of its inference server
(``mnemoscope proxy --upstream http://127.0.0.1:8080/v1 --profile DIR``). For
``POST /v1/chat/completions`` and ``POST /v1/completions``:

1. The request is forwarded to the upstream unchanged, except that an ``mnemoscope`` object
   in the body (the proxy's own field: ``{"context": "...", "query": "..."}``) is removed
   first. Every other route (``/v1/models``, ...) is passed through as is.
2. The upstream's answer is returned unchanged (same status, same JSON, same stream chunks).
   A JSON answer gains one extra top-level field, ``mnemoscope`` (the audit; OpenAI clients
   ignore unknown fields), and the header ``X-Mnemoscope-Audit`` (a compact JSON summary:
   ``id``, ``status``, ``source``, ``p_memory``, ``repcs_z``).
3. The answer is audited through the endpoint backend (:class:`~mnemoscope.pipelines.endpoint.
   EndpointAuditor`): the upstream's answer text is teacher-forced on the with- and
   no-context prompts of the profile. The audit is written to the tamper-evident log
   (:mod:`mnemoscope.server.storage`, the same one ``mnemoscope serve`` writes).

**Where context and query come from**: the ``mnemoscope`` object when present; otherwise,
with ``context_role`` set, the content of the chat messages with that role (joined by blank
lines) is the context and the last message of ``query_role`` (default ``user``) the query.
Neither: the answer is forwarded and the audit is ``skipped`` (not logged).

**Streaming** (``"stream": true``): chunks are passed through as they arrive; the header
``X-Mnemoscope-Audit-Id`` announces the audit's id, and the audit runs and is logged when the
stream ends (read it back at ``GET /mnemoscope/audits/{id}``).

**Failures never touch the answer**: an audit that fails (the auditing server down, a
tokenization mismatch, a storage error) is recorded as ``status: "failed"`` with its reason,
in the header, the extra field and the log, and the upstream's answer is forwarded as it came.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import Request  # module level: FastAPI resolves route annotations here

from mnemoscope.pipelines.audit import AuditFailure, AuditRequest

__all__ = ["ProxySettings", "audit_inputs", "create_proxy_app", "sse_answer"]

log = logging.getLogger(__name__)

AUDITED_PATHS = ("chat/completions", "completions")
_HOP = {
    "host",
    "content-length",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
    "accept-encoding",
    "content-encoding",
}


@dataclass(frozen=True)
class ProxySettings:
    """Settings of the audit proxy.

    Attributes:
        upstream: the inference server's base URL ending in ``/v1``.
        context_role: chat role whose messages are the context (``None``: only the
            ``mnemoscope`` object gives a context).
        query_role: chat role whose last message is the query.
        upstream_api_key_env: replace the client's ``Authorization`` with this variable's key.
        timeout: seconds for an upstream request.
        header: also return the audit summary in ``X-Mnemoscope-Audit``.
    """

    upstream: str
    context_role: str | None = None
    query_role: str = "user"
    upstream_api_key_env: str | None = None
    timeout: float = 300.0
    header: bool = True


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def audit_inputs(body: dict[str, Any], settings: ProxySettings) -> tuple[str, str] | str:
    """``(context, query)`` for a request body, or the reason there is none (module doc)."""
    m = body.get("mnemoscope")
    if isinstance(m, dict):
        ctx, q = m.get("context", ""), m.get("query")
        if not isinstance(ctx, str) or not isinstance(q, str) or not q.strip():
            return "the mnemoscope object needs a string 'query' (and a string 'context')"
        return ctx, q
    msgs = body.get("messages")
    if settings.context_role and isinstance(msgs, list):
        ctx = "\n\n".join(
            _text(mm.get("content"))
            for mm in msgs
            if isinstance(mm, dict) and mm.get("role") == settings.context_role
        )
        users = [
            _text(mm.get("content"))
            for mm in msgs
            if isinstance(mm, dict) and mm.get("role") == settings.query_role
        ]
        if not users or not users[-1].strip():
            return f"no '{settings.query_role}' message to take the query from"
        return ctx, users[-1]
    return "no mnemoscope object in the request (and no --context-role)"


def _answer_of(resp: dict[str, Any]) -> str | None:
    try:
        ch = resp["choices"][0]
    except (KeyError, IndexError, TypeError):
        return None
    if isinstance(ch.get("message"), dict):
        return _text(ch["message"].get("content"))
    if isinstance(ch.get("text"), str):
        return str(ch["text"])
    return None


def sse_answer(raw: bytes) -> str:
    """The answer text of an OpenAI server-sent-event stream (chat deltas or completion texts)."""
    parts: list[str] = []
    for line in raw.decode("utf-8", errors="replace").splitlines():
        line = line.strip()
        if not line.startswith("data:"):
            continue
        data = line[len("data:") :].strip()
        if not data or data == "[DONE]":
            continue
        try:
            ev = json.loads(data)
            ch = ev["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            continue
        delta = ch.get("delta")
        if isinstance(delta, dict) and isinstance(delta.get("content"), str):
            parts.append(delta["content"])
        elif isinstance(ch.get("text"), str):
            parts.append(ch["text"])
    return "".join(parts)


def _summary(rec: dict[str, Any]) -> dict[str, Any]:
    ev = rec.get("evidence") or {}
    return {
        "id": rec.get("id"),
        "status": rec.get("status"),
        "source": rec.get("source"),
        "p_memory": rec.get("p_memory"),
        "repcs_z": ev.get("repcs_z"),
        "error": rec.get("error"),
        "reason": rec.get("reason"),
    }


def create_proxy_app(
    settings: ProxySettings,
    *,
    auditor: Any,
    store: Any,
    transport: Any = None,
) -> Any:
    """The proxy app (FastAPI). ``auditor`` is an :class:`EndpointAuditor` (or ``None``: forward
    only, every audit ``failed`` with that reason); ``store`` an :class:`AuditStore` (owned and
    closed by the app)."""
    import httpx
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, Response, StreamingResponse

    from mnemoscope.server.app import audit_record

    base = settings.upstream.rstrip("/")
    if not base.endswith("/v1"):
        from mnemoscope.errors import InputError

        raise InputError(f"--upstream must be the server's base URL ending in /v1, got {settings.upstream!r}")
    root = base[: -len("/v1")]
    client = httpx.AsyncClient(timeout=httpx.Timeout(settings.timeout), transport=transport)
    store_lock = asyncio.Lock()
    state: dict[str, Any] = {"n_audits": 0, "n_failed": 0, "n_skipped": 0}

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await client.aclose()
            store.close()

    app = FastAPI(
        title="mnemoscope audit proxy",
        description="OpenAI-compatible pass-through that audits every answer (docs/endpoint.md)",
        lifespan=lifespan,
    )

    def upstream_headers(request: Request) -> dict[str, str]:
        h = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        if settings.upstream_api_key_env:
            import os

            key = os.environ.get(settings.upstream_api_key_env, "")
            h["authorization"] = f"Bearer {key}"
        return h

    def run_audit(aid: str, ctx: str, query: str, answer: str, meta: dict[str, Any]) -> dict[str, Any]:
        """Blocking: audit one answer and build its log record (never raises)."""
        t0 = time.perf_counter()
        rec: dict[str, Any] = {"id": aid, "created_at": time.time(), "via": "proxy", **meta}
        try:
            if auditor is None:
                raise RuntimeError("no auditor configured")
            if not answer.strip():
                raise ValueError("the upstream answer is empty: nothing to audit")
            (res,) = auditor.audit([AuditRequest(ctx, query, answer=answer, id=aid)])
            if isinstance(res, AuditFailure):
                raise RuntimeError(f"HTTP {res.status}: {res.message}")
            rec.update(audit_record(res), status="audited")
            rec["model"] = {k: auditor.model_info.get(k) for k in ("name", "fingerprint", "spec", "adapter")}
            rec["profile_hash"] = auditor.profile.content_hash
        except Exception as e:
            rec.update(status="failed", error=f"{type(e).__name__}: {e}", anomaly_flag=False)
        rec["latency_ms"] = (time.perf_counter() - t0) * 1000.0
        return rec

    async def audit_and_store(
        aid: str, ctx: str, query: str, answer: str, meta: dict[str, Any]
    ) -> dict[str, Any]:
        rec = await asyncio.to_thread(run_audit, aid, ctx, query, answer, meta)
        try:
            async with store_lock:
                (seq,) = await asyncio.to_thread(store.append, [rec])
            rec["seq"] = seq
        except Exception as e:
            rec["status"] = "failed" if rec.get("status") != "audited" else "audited-not-logged"
            rec["log_error"] = f"{type(e).__name__}: {e}"
        key = "n_audits" if rec.get("status") == "audited" else "n_failed"
        state[key] += 1
        if rec.get("status") != "audited":
            log.warning("proxy audit %s: %s %s", aid, rec.get("error", ""), rec.get("log_error", ""))
        return rec

    @app.get("/mnemoscope/health")
    async def health() -> Any:
        return {"status": "ok", "upstream": base, **state}

    @app.get("/mnemoscope/audits/{audit_id}")
    async def get_audit(audit_id: str) -> Any:
        rec = await asyncio.to_thread(store.get, audit_id)
        if rec is None:
            return JSONResponse({"detail": f"no audit {audit_id} (yet)"}, status_code=404)
        return rec

    async def forward(request: Request, path: str, body: bytes) -> httpx.Response:
        url = f"{root}/{path}"
        req = client.build_request(
            request.method, url, content=body, headers=upstream_headers(request), params=request.query_params
        )
        return await client.send(req, stream=True)

    def passthrough_headers(resp: httpx.Response) -> dict[str, str]:
        return {k: v for k, v in resp.headers.items() if k.lower() not in _HOP}

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
    async def proxy(path: str, request: Request) -> Any:
        raw = await request.body()
        audited = (
            request.method == "POST" and path.removeprefix("v1/") in AUDITED_PATHS and path.startswith("v1/")
        )
        body: dict[str, Any] | None = None
        if audited:
            try:
                parsed = json.loads(raw) if raw else None
                body = parsed if isinstance(parsed, dict) else None
            except ValueError:
                body = None
        if body is not None and "mnemoscope" in body:
            fwd = {k: v for k, v in body.items() if k != "mnemoscope"}
            raw_fwd = json.dumps(fwd).encode()
        else:
            raw_fwd = raw
        try:
            resp = await forward(request, path, raw_fwd)
        except httpx.HTTPError as e:
            return JSONResponse(
                {
                    "error": {
                        "message": f"mnemoscope proxy: upstream {root}/{path} unreachable ({type(e).__name__})"
                    }
                },
                status_code=502,
            )
        inputs = audit_inputs(body, settings) if body is not None else "not an audited request"
        if body is None or isinstance(inputs, str) or resp.status_code != 200:
            if body is not None:
                state["n_skipped"] += 1
            content = await resp.aread()
            await resp.aclose()
            headers = passthrough_headers(resp)
            if body is not None and settings.header:
                reason = inputs if isinstance(inputs, str) else f"upstream status {resp.status_code}"
                headers["X-Mnemoscope-Audit"] = json.dumps({"status": "skipped", "reason": reason})
            return Response(content=content, status_code=resp.status_code, headers=headers)
        ctx, query = inputs
        aid = uuid.uuid4().hex
        meta = {"upstream": base, "path": path, "stream": bool(body.get("stream"))}
        if body.get("stream"):
            headers = passthrough_headers(resp)
            headers["X-Mnemoscope-Audit-Id"] = aid
            chunks: list[bytes] = []

            async def relay() -> AsyncIterator[bytes]:
                try:
                    async for chunk in resp.aiter_raw():
                        chunks.append(chunk)
                        yield chunk
                finally:
                    await resp.aclose()
                    answer = sse_answer(b"".join(chunks))
                    task = asyncio.create_task(audit_and_store(aid, ctx, query, answer, meta))
                    pending.add(task)
                    task.add_done_callback(pending.discard)

            return StreamingResponse(relay(), status_code=resp.status_code, headers=headers)
        content = await resp.aread()
        await resp.aclose()
        headers = passthrough_headers(resp)
        try:
            data = json.loads(content)
        except ValueError:
            return Response(content=content, status_code=resp.status_code, headers=headers)
        answer = _answer_of(data) if isinstance(data, dict) else None
        rec = await audit_and_store(aid, ctx, query, answer or "", meta)
        if settings.header:
            headers["X-Mnemoscope-Audit"] = json.dumps(_summary(rec), ensure_ascii=True)
        if isinstance(data, dict):
            data["mnemoscope"] = rec
            content = json.dumps(data, ensure_ascii=False).encode()
        headers.pop("content-type", None)
        return Response(
            content=content, status_code=resp.status_code, headers=headers, media_type="application/json"
        )

    pending: set[asyncio.Task[Any]] = set()
    app.state.pending = pending
    app.state.proxy_state = state
    return app
