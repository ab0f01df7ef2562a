"""The audit proxy under upstream faults: the client gets what the upstream sent (or its error), the
audit log says why the audit failed, nothing hangs and nothing leaks.

Faults a real llama.cpp server cannot produce on demand (5xx, malformed JSON, a stream cut
halfway, a silent upstream) come from a tiny real HTTP server in this file that misbehaves on
purpose; an upstream that is down is a closed port. The faults against the real llama.cpp
server are in tests/test_proxy.py.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

CTX = "Quenmar is a small town in the north. The river Zorblat runs through Quenmar."
QUERY = "Which river runs through Quenmar?"
MESSAGES = [{"role": "user", "content": f"Context: {CTX}\n\nQuestion: {QUERY}\n\nAnswer:"}]
ANSWER = "The river Zorblat."


def _chunk(text: str) -> bytes:
    ev = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": text}}],
    }
    return f"data: {json.dumps(ev)}\n\n".encode()


class _Bad(BaseHTTPRequestHandler):
    """Behaviour by the request's ``model``: ok, 5xx, malformed, cut, slow, slow-stream."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *a):  # quiet
        pass

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._send(200, json.dumps({"object": "list", "data": [{"id": "bad", "object": "model"}]}).encode())

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        mode = body.get("model", "ok")
        self.server.seen.append(body)
        if mode == "5xx":
            return self._send(503, b'{"error": {"message": "model is loading", "code": 503}}')
        if mode == "malformed":
            return self._send(200, b'{"choices": [{"message": {"content": "Zorb')
        if mode == "slow":
            time.sleep(3)
        if body.get("stream"):  # chunked, as uvicorn (llama-cpp-python's server) streams
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def put(data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            words = ANSWER.split(" ")
            for i, w in enumerate(words):
                put(_chunk(w if i == 0 else " " + w))
                if mode == "cut" and i == 1:
                    self.connection.shutdown(socket.SHUT_RDWR)  # dropped mid-answer, no final chunk
                    self.close_connection = True
                    return
                if mode == "slow-stream":
                    time.sleep(0.3)
            put(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            return
        resp = {
            "id": "c1",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWER}}],
        }
        self._send(200, json.dumps(resp).encode())


@pytest.fixture(scope="module")
def bad_upstream():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Bad)
    srv.daemon_threads = True
    srv.seen = []
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1", srv
    srv.shutdown()
    srv.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Proxy:
    def __init__(self, upstream: str, db, **settings):
        import uvicorn

        from mnemoscope.server.proxy import ProxySettings, create_proxy_app
        from mnemoscope.server.storage import open_store

        self.db = db
        app = create_proxy_app(
            ProxySettings(upstream=upstream, **settings), auditor=None, store=open_store(db)
        )
        self.app = app
        self.port = _free_port()
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "proxy did not start"
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self):
        self.server.should_exit = True
        self.thread.join(timeout=30)

    def log(self, aid: str) -> dict:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            r = httpx.get(f"{self.url}/mnemoscope/audits/{aid}", timeout=5)
            if r.status_code == 200:
                return r.json()
            time.sleep(0.05)
        raise AssertionError(f"audit {aid} never logged")


@pytest.fixture(scope="module")
def proxy(bad_upstream, tmp_path_factory):
    p = _Proxy(bad_upstream[0], tmp_path_factory.mktemp("faults") / "audit.db", timeout=1.0)
    yield p
    p.stop()


def _post(url: str, model: str, *, stream: bool = False, timeout: float = 20):
    body = {"model": model, "messages": MESSAGES, "stream": stream, "mnemoscope": {"context": CTX}}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=timeout)


def test_upstream_5xx_is_passed_through_and_logged(proxy, bad_upstream):
    r = _post(proxy.url, "5xx")
    assert r.status_code == 503 and r.json() == {"error": {"message": "model is loading", "code": 503}}
    head = json.loads(r.headers["x-mnemoscope-audit"])
    assert head["status"] == "failed" and "HTTP 503" in head["error"]
    assert proxy.log(head["id"])["error"].startswith("upstream answered HTTP 503")
    assert "mnemoscope" not in bad_upstream[1].seen[-1]  # the proxy's own field is never forwarded


def test_malformed_json_passes_unchanged_and_is_logged(proxy):
    r = _post(proxy.url, "malformed")
    assert r.status_code == 200 and r.content == b'{"choices": [{"message": {"content": "Zorb'
    head = json.loads(r.headers["x-mnemoscope-audit"])
    assert head["status"] == "failed" and "not a JSON object" in proxy.log(head["id"])["error"]


def test_slow_upstream_times_out_with_an_openai_error(proxy):
    t0 = time.monotonic()
    r = _post(proxy.url, "slow")
    assert time.monotonic() - t0 < 2.9  # the proxy's 1 s time-out, not the upstream's 3 s
    assert r.status_code == 504 and "timed out after 1 s" in r.json()["error"]["message"]
    head = json.loads(r.headers["x-mnemoscope-audit"])
    assert "timed out" in proxy.log(head["id"])["error"]


def test_upstream_down_is_a_502_and_logged(tmp_path):
    p = _Proxy(f"http://127.0.0.1:{_free_port()}/v1", tmp_path / "audit.db")
    try:
        r = _post(p.url, "ok")
        assert r.status_code == 502 and "unreachable" in r.json()["error"]["message"]
        head = json.loads(r.headers["x-mnemoscope-audit"])
        assert "unreachable" in p.log(head["id"])["error"]
    finally:
        p.stop()


def test_stream_passes_unchanged_then_the_verdict_event(proxy, bad_upstream):
    from mnemoscope.server.proxy_stream import read_verdict_event, sse_answer

    with httpx.stream(
        "POST",
        f"{proxy.url}/v1/chat/completions",
        json={"model": "ok", "messages": MESSAGES, "stream": True, "mnemoscope": {"context": CTX}},
        timeout=20,
    ) as r:
        aid = r.headers["x-mnemoscope-audit-id"]
        raw = b"".join(r.iter_raw())
    upstream_part, _, tail = raw.partition(b"data: [DONE]\n\n")
    assert sse_answer(upstream_part) == ANSWER and tail.startswith(b"event: mnemoscope\n")
    ev = read_verdict_event(raw)
    assert ev["id"] == aid and ev["status"] == "failed" and "no auditor" in ev["error"]  # auditor=None here
    assert proxy.log(aid)["status"] == "failed"


def test_official_client_ignores_the_verdict_event_and_the_answer_is_still_audited(proxy):
    """OpenAI's client closes the connection at [DONE]: the audit must not depend on it reading on."""
    from openai import OpenAI

    c = OpenAI(base_url=f"{proxy.url}/v1", api_key="x", max_retries=0, timeout=20)
    with c.chat.completions.with_streaming_response.create(
        model="ok", messages=MESSAGES, stream=True, extra_body={"mnemoscope": {"context": CTX}}
    ) as resp:
        aid = resp.headers["x-mnemoscope-audit-id"]
        text = "".join((ch.choices[0].delta.content or "") for ch in resp.parse())
    assert text == ANSWER
    rec = proxy.log(aid)  # audited (here: auditor=None, so 'no auditor'), not 'client disconnected'
    assert rec["status"] == "failed" and "no auditor configured" in rec["error"], rec


def test_cut_stream_reaches_the_client_as_cut_and_is_logged(proxy):
    raw = b""
    with httpx.stream(
        "POST",
        f"{proxy.url}/v1/chat/completions",
        json={"model": "cut", "messages": MESSAGES, "stream": True},
        timeout=20,
    ) as r:
        aid = r.headers["x-mnemoscope-audit-id"]
        with pytest.raises(httpx.RemoteProtocolError):  # cut, as the upstream cut it
            for part in r.iter_raw():
                raw += part
    assert b"[DONE]" not in raw and b"event: mnemoscope" not in raw
    assert raw.count(b"data: ") == 2  # the two chunks the upstream sent before it dropped
    rec = proxy.log(aid)
    assert rec["status"] == "failed" and "broke off" in rec["error"]


def test_client_that_disconnects_is_logged_and_the_upstream_closed(proxy):
    with httpx.stream(
        "POST",
        f"{proxy.url}/v1/chat/completions",
        json={"model": "slow-stream", "messages": MESSAGES, "stream": True},
        timeout=20,
    ) as r:
        aid = r.headers["x-mnemoscope-audit-id"]
        next(r.iter_raw())  # read the first chunk, then leave
    rec = proxy.log(aid)
    assert rec["status"] == "failed" and "client disconnected" in rec["error"]


def test_audit_queue_sheds_visibly():
    import asyncio

    from mnemoscope.server.proxy_audit import AuditQueue

    async def go():
        q = AuditQueue(max_pending=2, workers=1)
        t1 = q.submit(lambda: time.sleep(0.2) or 1)
        t2 = q.submit(lambda: 2)
        assert q.submit(lambda: 3) is None and q.n_shed == 1 and q.pending == 2
        assert [await t1, await t2] == [1, 2] and q.pending == 0
        assert q.submit(lambda: 4) is not None
        assert await q.drain(5) == 0

    asyncio.run(go())


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_no_leak_over_many_requests(proxy):
    """A smaller version of benchmarks/bench_proxy.py --leak: fds and memory flat over 200 requests of
    every kind (ok, 5xx, malformed, cut stream, full stream)."""
    modes = [("ok", False), ("5xx", False), ("malformed", False), ("cut", True), ("ok", True)]

    def burst(n: int) -> None:
        with httpx.Client(timeout=20) as c:
            for i in range(n):
                model, stream = modes[i % len(modes)]
                body = {
                    "model": model,
                    "messages": MESSAGES,
                    "stream": stream,
                    "mnemoscope": {"context": CTX},
                }
                try:
                    with c.stream("POST", f"{proxy.url}/v1/chat/completions", json=body) as r:
                        for _ in r.iter_raw():
                            pass
                except httpx.HTTPError:
                    pass  # the cut stream

    burst(30)  # warm-up: pools, caches, the log's first pages
    time.sleep(0.5)
    fd0, rss0 = _fds(), _rss_kb()
    burst(200)
    time.sleep(0.5)
    fd1, rss1 = _fds(), _rss_kb()
    assert fd1 - fd0 <= 3, (fd0, fd1)
    assert rss1 - rss0 < 20_000, (rss0, rss1)  # kB
    h = httpx.get(f"{proxy.url}/mnemoscope/health", timeout=5).json()
    assert h["audits_in_flight"] == 0


def test_every_shed_stream_audit_is_logged(bad_upstream, tmp_path, monkeypatch):
    """Concurrent streams through the official client (which closes at [DONE]) against a full audit
    queue: every answer's audit is in the log, as audited or as skipped (shed), none is lost
    (found by bench_proxy load: 5 of 19 shed stream audits were counted but never logged)."""
    from concurrent.futures import ThreadPoolExecutor

    from openai import OpenAI

    import mnemoscope.server.proxy as proxy_mod
    from mnemoscope.server.proxy_audit import base_record

    def slow_audit(auditor, located, answer, aid, meta, **kw):
        time.sleep(0.5)
        return base_record(aid, meta, "audited")

    monkeypatch.setattr(proxy_mod, "audit_app_prompt", slow_audit)
    p = _Proxy(bad_upstream[0], tmp_path / "audit.db", timeout=5.0, audit_queue=1)
    try:
        c = OpenAI(base_url=f"{p.url}/v1", api_key="x", max_retries=0, timeout=20)

        def one(i: int) -> str:
            with c.chat.completions.with_streaming_response.create(
                model="ok", messages=MESSAGES, stream=True, extra_body={"mnemoscope": {"context": CTX}}
            ) as resp:
                aid = resp.headers["x-mnemoscope-audit-id"]
                assert "".join((ch.choices[0].delta.content or "") for ch in resp.parse()) == ANSWER
            return aid

        with ThreadPoolExecutor(6) as ex:
            aids = list(ex.map(one, range(12)))
        statuses = [p.log(a)["status"] for a in aids]
        h = httpx.get(f"{p.url}/mnemoscope/health", timeout=5).json()
    finally:
        p.stop()
    assert set(statuses) <= {"audited", "skipped"} and "skipped" in statuses, statuses
    assert h["n_skipped"] == h["n_shed"] == statuses.count("skipped")
    assert h["n_audited"] == statuses.count("audited")
