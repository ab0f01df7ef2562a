"""The audit proxy: an OpenAI-compatible front that audits every answer of the server behind it.

A RAG application points its OpenAI client at the proxy instead of its inference server
(``mnemoscope proxy --upstream http://127.0.0.1:8080/v1 --profile DIR``). docs/proxy.md has
the full contract; in short, for ``POST /v1/chat/completions`` and ``POST /v1/completions``:

1. **Forwarded unchanged**, except that the proxy's own ``mnemoscope`` object (if any) is
   removed from the body. Every other route (``/v1/models``, ...) is passed through as is.
2. **Answered unchanged**: same status, same JSON, same stream chunks as they arrive. A JSON
   answer gains one extra top-level field, ``mnemoscope`` (the audit record; OpenAI clients
   ignore unknown fields) and the header ``X-Mnemoscope-Audit`` (a compact summary). A stream
   gains ``X-Mnemoscope-Audit-Id`` and, after ``data: [DONE]``, one ``event: mnemoscope``
   carrying the verdict (:mod:`mnemoscope.server.proxy_stream`; OpenAI clients stop at
   ``[DONE]`` and never see it).
3. **The application's own prompt is audited**: its messages (system prompt, few-shot turns,
   history) are the with-context prompt, and the same messages with only the retrieved context
   removed the no-context prompt (:mod:`mnemoscope.audit.layout`: where the context is
   comes from ``mnemoscope.context`` or the documented default). A context that cannot be
   located makes the audit ``undetermined`` (with the reason); a layout the profile was not
   calibrated for makes it ``refused`` (unless ``--accept-layout``).
4. **Every outcome is logged** in the tamper-evident audit log (``mnemoscope serve``'s), also
   the ones that are not verdicts: upstream errors, time-outs, cut streams, clients gone,
   audits shed by the bounded queue (``skipped``).

**Failures never touch the answer**: an upstream error is passed through as the upstream sent
it (its status and body); an unreachable upstream is a 502 and a time-out a 504, with an
OpenAI-style error body; an audit that fails leaves the answer as it came.

``GET /mnemoscope/metrics`` (Prometheus) counts the audits by status and says whether the live
answers drift from the profile's calibration answers (:class:`~mnemoscope.server.metrics.DriftWatch`,
fed by every ``audited`` record).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import Request  # module level: FastAPI resolves route annotations here

from mnemoscope.audit.prompt_match import locate_for_profile
from mnemoscope.errors import InputError
from mnemoscope.server.ledger import new_audit_id
from mnemoscope.server.proxy_audit import AuditQueue, audit_app_prompt, base_record, summary
from mnemoscope.server.proxy_stream import saw_done, saw_finish, sse_answer, verdict_event
from mnemoscope.stats.drift import DEFAULT_ALPHA, DEFAULT_WINDOW
from mnemoscope.trace.endpoint_score import served_scores

__all__ = ["ProxySettings", "create_proxy_app", "freeze_startup_heap", "sse_answer"]

log = logging.getLogger(__name__)

AUDITED_PATHS = ("v1/chat/completions", "v1/completions")
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
        context_role: chat role whose single message is the context, when the request names none.
        query_role: chat role of the query (its last message is "the user message" of the layouts).
        upstream_api_key_env: replace the client's ``Authorization`` with this variable's key.
        timeout: seconds an upstream request may take (connect, and between two bytes read).
        header: also return the audit summary in ``X-Mnemoscope-Audit``.
        audit_queue: audits in flight at most (running + waiting); more are ``skipped`` (shed).
        audit_workers: audits running at once.
        accept_layouts: context layouts audited although the profile was not calibrated on them.
        stream_verdict: append the ``event: mnemoscope`` verdict after a stream's ``[DONE]``.
        drain_timeout: seconds to wait at shutdown for the audits in flight to be logged.
        audit_wait: seconds a JSON answer waits for its audit (``None``: until it is done); after
            that the answer is returned with ``status: "pending"`` and the audit is logged when it
            ends (``GET /mnemoscope/audits/{id}``). Streams never wait: their verdict follows ``[DONE]``.
        audit: ``False``: forward only (the ``mnemoscope`` object is still removed; nothing is
            audited or logged), to measure what the proxy itself costs.
        served_logprobs: on llama-cpp-python and llama-server upstreams, ask for the answer's top-k log-probs in the
            application's (non-streamed) request and audit with them, so that the audit scores the
            no-context path only; they are removed from the answer when the application did not ask
            for log-probs (``logprobs: null``, as the upstream would have sent).
        drift_window: audited answers per window of the drift watch (``/mnemoscope/metrics``).
        drift_alpha: false-alarm probability of one drift window (:mod:`mnemoscope.stats.drift`).
        gc_freeze: at start, move the objects alive then (the imported libraries) out of the cyclic
            garbage collector's way (:func:`freeze_startup_heap`), so that the cyclic garbage every
            request leaves is freed at the pace of the proxy's own objects; ``False`` leaves the
            collector as it is (an application that embeds the proxy app and manages its own).
    """

    upstream: str
    context_role: str | None = None
    query_role: str = "user"
    upstream_api_key_env: str | None = None
    timeout: float = 300.0
    header: bool = True
    audit_queue: int = 16
    audit_workers: int = 1
    accept_layouts: tuple[str, ...] = ()
    stream_verdict: bool = True
    drain_timeout: float = 60.0
    audit: bool = True
    audit_wait: float | None = None
    served_logprobs: bool = True
    drift_window: int = DEFAULT_WINDOW
    drift_alpha: float = DEFAULT_ALPHA
    gc_freeze: bool = True


def _wants_served_logprobs(settings: ProxySettings, auditor: Any) -> bool:
    """Served log-probs are used on llama-cpp-python and llama-server upstreams only: both report
    them from the raw logits whatever the request's sampling settings (docs/endpoint.md), as the
    audit's own requests; llama-server gives token ids with them."""
    if not (settings.served_logprobs and settings.audit and auditor is not None):
        return False
    caps = getattr(getattr(auditor, "backend", None), "caps", None)  # an endpoint backend's
    kind = (getattr(caps, "server", None), getattr(caps, "score_method", ""))
    return kind in (
        ("llama-cpp-python", "grammar"),
        ("llama-cpp-python", "positions"),
        ("llama.cpp", "native"),
    )


def _ask_logprobs(body: dict[str, Any], path: str, raw: bytes, k: int) -> tuple[bool, bytes]:
    """``(added, raw)``: the request asks for the answer's top-k log-probs (added when it did not ask
    for any; a request that asks for log-probs itself is forwarded unchanged)."""
    if path == "v1/chat/completions":
        if body.get("logprobs") or body.get("top_logprobs") is not None:
            return False, raw
        extra = {"logprobs": True, "top_logprobs": k}
    elif path == "v1/completions":
        if body.get("logprobs") is not None:
            return False, raw
        extra = {"logprobs": k}
    else:
        return False, raw
    fwd = {key: v for key, v in body.items() if key != "mnemoscope"}
    return True, json.dumps({**fwd, **extra}).encode()


def _answer_of(resp: dict[str, Any]) -> str | None:
    from mnemoscope.audit.layout import message_text

    try:
        ch = resp["choices"][0]
    except (KeyError, IndexError, TypeError):
        return None
    if isinstance(ch.get("message"), dict):
        return message_text(ch["message"].get("content"))
    if isinstance(ch.get("text"), str):
        return str(ch["text"])
    return None


def _error_body(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": None, "param": None}}


def create_proxy_app(
    settings: ProxySettings,
    *,
    auditor: Any,
    store: Any,
    transport: Any = None,
) -> Any:
    """The proxy app (FastAPI). ``auditor`` is an endpoint :class:`~mnemoscope.audit.auditor.Auditor` (``Auditor.from_endpoint``) (or ``None``: forward
    only, every audit ``failed`` with that reason); ``store`` an :class:`AuditStore` (owned and
    closed by the app, after the audits in flight are logged)."""
    import httpx
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, Response, StreamingResponse
    from starlette.requests import ClientDisconnect

    from mnemoscope.server.records import audit_record

    base = settings.upstream.rstrip("/")
    if not base.endswith("/v1"):
        raise InputError(
            f"--upstream must be the server's base URL ending in /v1, got {settings.upstream!r}",
            field="upstream",
        )
    root = base[: -len("/v1")]
    client = httpx.AsyncClient(
        timeout=httpx.Timeout(settings.timeout),
        transport=transport,
        limits=httpx.Limits(max_connections=256, max_keepalive_connections=32),
    )
    queue = AuditQueue(settings.audit_queue, settings.audit_workers)
    counts: dict[str, int] = {
        k: 0 for k in ("audited", "undetermined", "refused", "skipped", "failed", "not_logged")
    }
    drift, registry = _drift_metrics(auditor, counts, settings)

    def store_record(rec: dict[str, Any]) -> dict[str, Any]:
        """Blocking: append to the log (never raises: a log error is recorded on the record)."""
        try:
            (seq,) = store.append([rec])
            rec["seq"] = seq
        except Exception as e:
            rec["log_error"] = f"{type(e).__name__}: {e}"
            counts["not_logged"] += 1
            log.error("proxy audit %s not logged: %s", rec.get("id"), rec["log_error"])
        status = str(rec.get("status"))
        counts[status] = counts.get(status, 0) + 1
        if status == "audited":
            drift.record(rec)  # the live answers against the profile's calibration answers
        if status == "failed":
            log.warning("proxy audit %s failed: %s", rec.get("id"), rec.get("error"))
        return rec

    async def log_now(rec: dict[str, Any]) -> dict[str, Any]:
        # shielded: a caller cancelled mid-write (a streaming client gone at [DONE]) loses no record
        task = asyncio.ensure_future(asyncio.to_thread(store_record, rec))
        pending_logs.add(task)
        task.add_done_callback(pending_logs.discard)
        return await asyncio.shield(task)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if settings.gc_freeze:
            log.info("proxy start: %d objects frozen out of the cyclic collector", freeze_startup_heap())
        try:
            yield
        finally:
            left = await queue.drain(settings.drain_timeout)
            if left:
                log.error(
                    "proxy shutdown: %d audits still running after %.0f s, not logged",
                    left,
                    settings.drain_timeout,
                )
            await client.aclose()
            store.close()

    app = FastAPI(
        title="mnemoscope audit proxy",
        description="OpenAI-compatible pass-through that audits every answer (docs/proxy.md)",
        lifespan=lifespan,
    )

    def upstream_headers(request: Request) -> dict[str, str]:
        h = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        if settings.upstream_api_key_env:
            import os

            key = os.environ.get(settings.upstream_api_key_env, "")
            h["authorization"] = f"Bearer {key}"
        return h

    def passthrough_headers(resp: httpx.Response) -> dict[str, str]:
        return {k: v for k, v in resp.headers.items() if k.lower() not in _HOP}

    def with_audit_header(headers: dict[str, str], rec: dict[str, Any]) -> dict[str, str]:
        if settings.header:
            headers["X-Mnemoscope-Audit"] = json.dumps(summary(rec), ensure_ascii=True)
        return headers

    async def audit_answer(
        located: Any,
        answer: str,
        aid: str,
        meta: dict[str, Any],
        wait: float | None = None,
        served: Any = None,
    ) -> dict[str, Any]:
        """Audit (through the bounded queue) and log; a full queue sheds it as ``skipped``."""
        task = queue.submit(
            lambda: store_record(
                audit_app_prompt(
                    auditor,
                    located,
                    answer,
                    aid,
                    meta,
                    accept_layouts=settings.accept_layouts,
                    record_of=audit_record,
                    served=served,
                    query_role=settings.query_role,
                )
            )
        )
        if task is None:
            return await log_now(
                base_record(
                    aid,
                    meta,
                    "skipped",
                    reason=f"audit queue full ({queue.max_pending} audits in flight, --audit-queue): shed, "
                    "the answer passed unaudited",
                )
            )
        if wait is None:
            return dict(await asyncio.shield(task))  # a client gone does not cancel the audit
        try:
            return dict(await asyncio.wait_for(asyncio.shield(task), wait))
        except TimeoutError:
            return base_record(
                aid,
                meta,
                "pending",
                reason=f"the audit was still running after {wait:g} s (--audit-wait); it is logged when it "
                f"ends: GET /mnemoscope/audits/{aid}",
            )

    @app.get("/mnemoscope/health")
    async def health() -> Any:
        return {
            "status": "ok",
            "upstream": base,
            "audits_in_flight": queue.pending,
            "audit_queue": queue.max_pending,
            "n_shed": queue.n_shed,
            **{f"n_{k}": v for k, v in counts.items()},
        }

    @app.get("/mnemoscope/metrics")
    async def metrics() -> Any:
        """Prometheus text format: the audits by status and the drift watch (docs/proxy.md#drift)."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/mnemoscope/audits/{audit_id}")
    async def get_audit(audit_id: str) -> Any:
        rec = await asyncio.to_thread(store.get, audit_id)
        if rec is None:
            return JSONResponse({"detail": f"no audit {audit_id} (yet)"}, status_code=404)
        return rec

    class Relay(StreamingResponse):
        """A streamed answer whose iterator is always closed (upstream connection released)."""

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            try:
                await super().__call__(scope, receive, send)
            except (ClientDisconnect, OSError):
                pass  # the client left: the iterator's cleanup records it
            except _UpstreamCut:
                pass  # returning mid-body makes the server drop the connection: the client sees the cut
            finally:
                await self.body_iterator.aclose()  # type: ignore[attr-defined]

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
    async def proxy(path: str, request: Request) -> Any:
        raw = await request.body()
        body: dict[str, Any] | None = None
        if request.method == "POST" and path in AUDITED_PATHS:
            try:
                parsed = json.loads(raw) if raw else None
                body = parsed if isinstance(parsed, dict) else None
            except ValueError:
                body = None
        spec: Any = None
        if body is not None and "mnemoscope" in body:
            m = body["mnemoscope"]
            spec = m.get("context") if isinstance(m, dict) else m
            raw = json.dumps({k: v for k, v in body.items() if k != "mnemoscope"}).encode()
        if not settings.audit:
            body = None  # forward only
        aid = new_audit_id()  # time-ordered: the log's id index grows at its right edge
        stream = bool(body and body.get("stream"))
        added_logprobs = False
        if body is not None and not stream and _wants_served_logprobs(settings, auditor):
            added_logprobs, raw = _ask_logprobs(body, path, raw, auditor.backend.settings.pair_config.top_k)
        meta = {"upstream": base, "path": path, "stream": stream}
        url = f"{root}/{path}"
        try:
            req = client.build_request(
                request.method,
                url,
                content=raw,
                headers=upstream_headers(request),
                params=request.query_params,
            )
            resp = await client.send(req, stream=True)
        except httpx.TimeoutException as e:
            msg = f"mnemoscope proxy: upstream {url} timed out after {settings.timeout:g} s ({type(e).__name__})"
            return await upstream_failed(body, aid, meta, msg, 504, "upstream_timeout")
        except httpx.HTTPError as e:
            msg = f"mnemoscope proxy: upstream {url} unreachable ({type(e).__name__}: {e})"
            return await upstream_failed(body, aid, meta, msg, 502, "upstream_unreachable")
        if body is None:  # not an audited request: pass through as it comes
            return Relay(_plain(resp), status_code=resp.status_code, headers=passthrough_headers(resp))
        try:
            # a profile calibrated on the application's prompt (calibrate --prompt) finds the
            # context by its placeholder and marks requests that differ from it
            located = locate_for_profile(
                body,
                auditor.profile.header if auditor is not None else {},
                spec,
                context_role=settings.context_role,
                query_role=settings.query_role,
            )
        except InputError as e:
            located = f"InputError: {e}"
        if resp.status_code != 200:
            content = await _read_closing(resp)
            rec = await log_now(
                base_record(
                    aid,
                    meta,
                    "failed",
                    error=f"upstream answered HTTP {resp.status_code}: "
                    f"{content[:300].decode('utf-8', errors='replace')}",
                )
            )
            return Response(
                content, resp.status_code, headers=with_audit_header(passthrough_headers(resp), rec)
            )
        if stream:
            headers = passthrough_headers(resp)
            headers["X-Mnemoscope-Audit-Id"] = aid
            return Relay(relay(resp, located, aid, meta), status_code=resp.status_code, headers=headers)
        try:
            content = await _read_closing(resp)
        except httpx.HTTPError as e:  # cut or timed out while reading the body
            msg = f"mnemoscope proxy: the upstream answer broke off ({type(e).__name__}: {e})"
            return await upstream_failed(body, aid, meta, msg, 502, "upstream_broken")
        headers = passthrough_headers(resp)
        try:
            data = json.loads(content)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            rec = await log_now(
                base_record(aid, meta, "failed", error="the upstream answer is not a JSON object")
            )
            return Response(content, resp.status_code, headers=with_audit_header(headers, rec))
        answer = _answer_of(data)
        served = (
            served_scores(data, by_id=auditor.backend.caps.score_method == "native")
            if _wants_served_logprobs(settings, auditor)
            else None
        )
        if added_logprobs:  # the application did not ask for them: the answer as the upstream would send it
            for ch in data.get("choices") or []:
                if isinstance(ch, dict):
                    ch["logprobs"] = None
        if isinstance(located, str):
            rec = await log_now(_unlocated(aid, meta, located))
        elif answer is None:
            rec = await log_now(
                base_record(aid, meta, "failed", error="no answer text in the upstream's choices")
            )
        else:
            rec = await audit_answer(located, answer, aid, meta, settings.audit_wait, served)
        data["mnemoscope"] = rec
        headers.pop("content-type", None)
        return Response(
            json.dumps(data, ensure_ascii=False).encode(),
            resp.status_code,
            headers=with_audit_header(headers, rec),
            media_type="application/json",
        )

    async def upstream_failed(
        body: dict[str, Any] | None, aid: str, meta: dict[str, Any], msg: str, status: int, kind: str
    ) -> Any:
        headers: dict[str, str] = {}
        if body is not None:
            rec = await log_now(base_record(aid, meta, "failed", error=msg))
            with_audit_header(headers, rec)
        return JSONResponse(_error_body(msg, kind), status_code=status, headers=headers)

    async def after_stream(raw: bytes, located: Any, aid: str, meta: dict[str, Any]) -> dict[str, Any]:
        """Audit (or record why not) a stream that reached ``[DONE]``, and log it."""
        if isinstance(located, str):
            return await log_now(_unlocated(aid, meta, located))
        return await audit_answer(located, sse_answer(raw), aid, meta)

    async def relay(
        resp: httpx.Response, located: Any, aid: str, meta: dict[str, Any]
    ) -> AsyncIterator[bytes]:
        """Pass the upstream's chunks on as they come; then audit, log, and send the verdict event.

        The stream is complete at ``data: [DONE]``: OpenAI's clients close the connection right
        there, so the audit does not depend on the client reading on (nor on how the upstream
        closes its side afterwards)."""
        chunks: list[bytes] = []
        finished = False
        done = False
        tail = b""
        broke: str | None = None
        try:
            try:
                async for chunk in resp.aiter_raw():
                    chunks.append(chunk)
                    done = done or saw_done(tail + chunk)
                    tail = (tail + chunk)[-64:]
                    yield chunk
                    if done:
                        break  # the answer is complete; what the upstream sends after [DONE] is not needed
            except httpx.HTTPError as e:  # the upstream broke off or went silent mid-stream
                broke = (
                    f"the upstream stream broke off after {sum(map(len, chunks))} bytes "
                    f"({type(e).__name__}: {e}); the partial answer is not audited"
                )
            finished = True
        finally:
            await resp.aclose()
            if not finished:
                raw_seen = b"".join(chunks)
                if done:  # the client stopped at [DONE] (as OpenAI clients do): audit all the same
                    _background(after_stream(raw_seen, located, aid, meta))
                else:  # the client went away while the answer was streaming
                    _background(
                        log_now(
                            base_record(
                                aid,
                                meta,
                                "failed",
                                error=f"the client disconnected after {len(raw_seen)} bytes of the stream; the "
                                "upstream request was closed, the partial answer is not audited",
                            )
                        )
                    )
        raw = b"".join(chunks)
        if broke is not None:
            await log_now(base_record(aid, meta, "failed", error=broke))
            raise _UpstreamCut(broke)  # the client's connection is cut too: it sees what the upstream did
        if not done and not saw_finish(raw):
            await log_now(
                base_record(
                    aid,
                    meta,
                    "failed",
                    error=f"the upstream stream ended after {len(raw)} bytes without [DONE] or a finish_reason "
                    "(cut): the partial answer is not audited",
                )
            )
            return
        rec = await after_stream(raw, located, aid, meta)
        if settings.stream_verdict and done:  # only after [DONE]: before it a client reads events as chunks
            yield verdict_event(rec)

    pending_logs: set[asyncio.Task[Any]] = set()

    def _background(coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        pending_logs.add(task)
        task.add_done_callback(pending_logs.discard)

    app.state.queue = queue
    app.state.counts = counts
    app.state.pending_logs = pending_logs
    return app


def freeze_startup_heap() -> int:
    """Collect, freeze what is alive (:func:`gc.freeze`), collect again; returns the frozen count.

    Every proxied request leaves cyclic garbage (httpx's response and its stream refer to each
    other; a cut stream adds an exception's traceback and frames). What a request in flight still
    holds when a young collection runs reaches the oldest generation, and CPython collects that
    one only when the objects promoted into it since its last full collection exceed 25 % of
    those it then held. With the libraries a proxy imports that is ~317,000 objects, so the
    garbage piled up for ~80,000 promotions before any of it was freed (with 4 concurrent
    clients: ~1 gc-tracked object and 0.45 kB of RSS more per request, issue 36), and the full
    collection, when it came, walked the whole heap (0.2-0.3 s, the event loop stopped). Frozen
    objects are never examined again, and the second collection resets the 25 % rule to the
    unfrozen heap: full collections then run every ~1,200-1,400 requests over a few thousand
    objects (at most 5.4 ms measured). Frozen objects are never freed by the cyclic collector:
    only what is alive at start is frozen, after collecting the garbage (docs/proxy.md "Memory").
    """
    gc.collect()
    gc.freeze()
    gc.collect()
    return gc.get_freeze_count()


class _UpstreamCut(Exception):
    """The upstream broke a stream off: the client's stream is broken off the same way."""


def _drift_metrics(auditor: Any, counts: dict[str, int], settings: ProxySettings) -> tuple[Any, Any]:
    """The proxy's drift watch (against the auditor's profile) and its Prometheus registry."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import CounterMetricFamily

    from mnemoscope.server.metrics import DriftWatch

    drift = DriftWatch()
    if auditor is None:
        drift.reason = "no auditor (forward only): drift not watched"
    else:
        drift.watch(auditor.profile, window=settings.drift_window, alpha=settings.drift_alpha)

    class _Counts:
        def describe(self) -> list[Any]:
            return []

        def collect(self) -> Any:
            c = CounterMetricFamily(
                "mnemoscope_proxy_audits", "answers by what became of their audit", labels=["status"]
            )
            for k, v in sorted(counts.items()):
                c.add_metric([k], v)
            yield c

    registry = CollectorRegistry()
    registry.register(drift)
    registry.register(_Counts())
    return drift, registry


def _unlocated(aid: str, meta: dict[str, Any], why: str) -> dict[str, Any]:
    """The record of an answer whose context was not located (or whose layout spec is malformed)."""
    if why.startswith("InputError"):
        return base_record(aid, meta, "failed", error=why)
    return base_record(aid, meta, "undetermined", source="undetermined", reason=why)


async def _read_closing(resp: Any) -> bytes:
    try:
        return bytes(await resp.aread())
    finally:
        await resp.aclose()


async def _plain(resp: Any) -> AsyncIterator[bytes]:
    import httpx

    try:
        async for chunk in resp.aiter_raw():
            yield chunk
    except httpx.HTTPError as e:  # the upstream broke off: the client gets what came
        log.warning("proxy: upstream broke off a pass-through answer: %s: %s", type(e).__name__, e)
    finally:
        await resp.aclose()
