"""The audit proxy in front of a real llama.cpp server, driven by the official ``openai`` client.

The proxy must return the upstream's answer unchanged (plain and streamed), add the audit in the
``X-Mnemoscope-Audit`` header and an extra ``mnemoscope`` field, write it to the tamper-evident
log, and never let an audit failure change or drop the answer.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

CTX = "Quenmar is a small town in the north. The river Zorblat runs through Quenmar."
QUERY = "Which river runs through Quenmar?"
MESSAGES = [{"role": "user", "content": f"Context: {CTX}\n\nQuestion: {QUERY}\n\nAnswer:"}]


class _Running:
    """A uvicorn server in a thread on a free loopback port (stopped by the fixture)."""

    def __init__(self, app):
        import uvicorn

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("proxy did not start")
            time.sleep(0.05)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def _proxy(llama_server, endpoint_profile, db, *, dead_auditor: bool = False):
    from mnemoscope.models.endpoint import EndpointClient, EndpointConfig
    from mnemoscope.pipelines.endpoint import EndpointAuditor
    from mnemoscope.server.proxy import ProxySettings, create_proxy_app
    from mnemoscope.server.storage import open_store

    client = EndpointClient(EndpointConfig(llama_server.base_url, concurrency=1, timeout=300))
    auditor = EndpointAuditor(client, endpoint_profile)
    if dead_auditor:  # the auditing server goes away after start-up
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        auditor.client = EndpointClient(EndpointConfig(f"http://127.0.0.1:{port}/v1", retries=0, timeout=5))
        auditor.client._caps = client.capabilities()
        auditor.client._model = client.model
    app = create_proxy_app(
        ProxySettings(upstream=llama_server.base_url), auditor=auditor, store=open_store(db)
    )
    return _Running(app)


@pytest.fixture(scope="module")
def proxy(llama_server, endpoint_profile, tmp_path_factory):
    db = tmp_path_factory.mktemp("proxy") / "audit.db"
    p = _proxy(llama_server, endpoint_profile, db)
    p.db = db
    yield p
    p.stop()


def _openai(url: str):
    from openai import OpenAI

    return OpenAI(base_url=url, api_key="not-needed", timeout=600, max_retries=0)


def test_answer_unchanged_audit_in_header_field_and_log(llama_server, proxy):
    direct = _openai(llama_server.base_url).chat.completions.create(
        model="smollm2", messages=MESSAGES, temperature=0, max_tokens=32
    )
    raw = _openai(proxy.base_url).chat.completions.with_raw_response.create(
        model="smollm2",
        messages=MESSAGES,
        temperature=0,
        max_tokens=32,
        extra_body={"mnemoscope": {"context": CTX, "query": QUERY}},
    )
    r = raw.parse()
    assert r.choices[0].message.content == direct.choices[0].message.content
    head = json.loads(raw.headers["x-mnemoscope-audit"])
    assert head["status"] == "audited" and head["source"] in ("context", "memory", "mixed", "undetermined")
    audit = r.model_extra["mnemoscope"]
    assert (
        audit["id"] == head["id"]
        and audit["backend"] == "endpoint"
        and audit["answer"] == direct.choices[0].message.content
    )
    assert audit["seq"] >= 1 and audit["via"] == "proxy"
    from mnemoscope.server.storage import open_store

    store = open_store(proxy.db, readonly=True)
    try:
        stored = store.get(head["id"])
        assert stored is not None and stored["source"] == head["source"]
        assert store.verify().ok
    finally:
        store.close()


def test_stream_passes_through_and_is_logged_at_the_end(llama_server, proxy):
    import httpx

    direct = _openai(llama_server.base_url).chat.completions.create(
        model="smollm2", messages=MESSAGES, temperature=0, max_tokens=32
    )
    with _openai(proxy.base_url).chat.completions.with_streaming_response.create(
        model="smollm2",
        messages=MESSAGES,
        temperature=0,
        max_tokens=32,
        stream=True,
        extra_body={"mnemoscope": {"context": CTX, "query": QUERY}},
    ) as resp:
        aid = resp.headers["x-mnemoscope-audit-id"]
        text = "".join((ch.choices[0].delta.content or "") for ch in resp.parse() if ch.choices)
    assert text == direct.choices[0].message.content
    deadline = time.monotonic() + 600
    while True:
        r = httpx.get(f"http://127.0.0.1:{proxy.port}/mnemoscope/audits/{aid}", timeout=10)
        if r.status_code == 200:
            break
        assert time.monotonic() < deadline, "the streamed answer's audit was never logged"
        time.sleep(1)
    rec = r.json()
    assert rec["status"] == "audited" and rec["stream"] is True and rec["answer"] == text


def test_no_audit_inputs_is_skipped_and_other_routes_pass(llama_server, proxy):
    c = _openai(proxy.base_url)
    raw = c.completions.with_raw_response.create(
        model="smollm2", prompt="1, 2, 3,", temperature=0, max_tokens=4
    )
    direct = _openai(llama_server.base_url).completions.create(
        model="smollm2", prompt="1, 2, 3,", temperature=0, max_tokens=4
    )
    assert raw.parse().choices[0].text == direct.choices[0].text
    assert json.loads(raw.headers["x-mnemoscope-audit"])["status"] == "skipped"
    assert [m.id for m in c.models.list().data] == ["smollm2"]


def test_audit_failure_never_changes_the_answer(llama_server, endpoint_profile, tmp_path):
    p = _proxy(llama_server, endpoint_profile, tmp_path / "audit.db", dead_auditor=True)
    try:
        direct = _openai(llama_server.base_url).chat.completions.create(
            model="smollm2", messages=MESSAGES, temperature=0, max_tokens=32
        )
        raw = _openai(p.base_url).chat.completions.with_raw_response.create(
            model="smollm2",
            messages=MESSAGES,
            temperature=0,
            max_tokens=32,
            extra_body={"mnemoscope": {"context": CTX, "query": QUERY}},
        )
        assert raw.parse().choices[0].message.content == direct.choices[0].message.content
        head = json.loads(raw.headers["x-mnemoscope-audit"])
        assert head["status"] == "failed" and "unreachable" in head["error"]
    finally:
        p.stop()
    from mnemoscope.server.storage import open_store

    store = open_store(tmp_path / "audit.db", readonly=True)
    try:
        rec = store.get(head["id"])
        assert rec is not None and rec["status"] == "failed" and store.verify().ok
    finally:
        store.close()
