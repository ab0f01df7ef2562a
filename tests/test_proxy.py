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

from helpers import prom_series

CTX = "Quenmar is a small town in the north. The river Zorblat runs through Quenmar."
QUERY = "Which river runs through Quenmar?"
MESSAGES = [{"role": "user", "content": f"Context: {CTX}\n\nQuestion: {QUERY}\n\nAnswer:"}]


# -- where the context is (pure: no server) ----------------------------------------------------------

APP_MESSAGES = [
    {"role": "system", "content": "You are a terse assistant. Answer in one short sentence."},
    {
        "role": "user",
        "content": "Context: Paris is the capital of France.\n\nQuestion: What is the capital of France?",
    },
    {"role": "assistant", "content": "Paris."},
    {"role": "user", "content": f"Context: {CTX}\n\nQuestion: {QUERY}"},
]


def test_default_layout_finds_the_last_context_block_and_removes_only_it():
    from mnemoscope.audit.layout import locate_context

    loc = locate_context({"messages": APP_MESSAGES})
    assert not isinstance(loc, str)
    assert loc.context == CTX and loc.layout == "user" and loc.message == 3
    assert loc.messages_without[3]["content"] == f"Context: \n\nQuestion: {QUERY}"
    assert loc.messages_without[:3] == loc.messages_with[:3] == APP_MESSAGES[:3]  # few-shot + system kept
    assert loc.query == f"Context: \n\nQuestion: {QUERY}".strip()


def test_layout_specs_message_delimiters_text_and_tags():
    from mnemoscope.audit.layout import locate_context

    sys_msgs = [
        {"role": "system", "content": f"Answer from these documents.\n<docs>{CTX}</docs>\nBe brief."},
        {"role": "user", "content": QUERY},
    ]
    by_delims = locate_context({"messages": sys_msgs}, {"start": "<docs>", "end": "</docs>"})
    assert by_delims.context == CTX and by_delims.layout == "system"
    assert (
        by_delims.messages_without[0]["content"] == "Answer from these documents.\n<docs></docs>\nBe brief."
    )
    by_default = locate_context({"messages": sys_msgs})
    assert by_default.context == CTX and by_default.how == "default: <docs> tags"
    by_text = locate_context({"messages": sys_msgs}, CTX)
    assert (by_text.start, by_text.end) == (by_delims.start, by_delims.end)
    separate = [{"role": "system", "content": CTX}, {"role": "user", "content": QUERY}]
    whole = locate_context({"messages": separate}, {"message": 0})
    assert whole.context == CTX and whole.messages_without[0]["content"] == "" and whole.layout == "system"
    by_role = locate_context(
        {"messages": [{"role": "tool", "content": CTX}, *separate[1:]]}, context_role="tool"
    )
    assert by_role.layout == "message:tool"
    prompt = locate_context({"prompt": f"Context: {CTX}\n\nQuestion: {QUERY}\n\nAnswer:"})
    assert prompt.layout == "prompt" and prompt.prompt_without == f"Context: \n\nQuestion: {QUERY}\n\nAnswer:"


def test_unlocatable_context_says_why_and_bad_specs_name_the_field():
    from mnemoscope.audit.layout import locate_context
    from mnemoscope.errors import InputError

    why = locate_context({"messages": [{"role": "user", "content": "Hello there"}]})
    assert isinstance(why, str) and "could not be located" in why
    assert "does not occur verbatim" in locate_context({"messages": APP_MESSAGES}, "not in there")
    assert "out of range" in locate_context({"messages": APP_MESSAGES}, {"message": 9})
    for bad in ({"message": "0"}, {"start": "<a>"}, {"nope": 1}, 3):
        with pytest.raises(InputError, match=r"mnemoscope\.context"):
            locate_context({"messages": APP_MESSAGES}, bad)


def test_profile_layout_refuses_what_it_was_not_calibrated_for():
    from mnemoscope.audit.layout import LayoutMismatch, check_layout, locate_context, profile_layout

    chat_header = {"prompt": {"chat": True}}
    assert profile_layout(chat_header) == "user" and profile_layout({"prompt": {"chat": False}}) == "prompt"
    assert profile_layout({"layout": {"context_in": "system"}, "prompt": {"chat": True}}) == "system"
    check_layout(chat_header, locate_context({"messages": APP_MESSAGES}))  # the template layout: fine
    in_system = locate_context(
        {
            "messages": [
                {"role": "system", "content": f"<context>{CTX}</context>"},
                {"role": "user", "content": QUERY},
            ]
        }
    )
    with pytest.raises(LayoutMismatch, match="--accept-layout system"):
        check_layout(chat_header, in_system, profile_name="prof/")


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


def _proxy(llama_server, endpoint_profile, db, *, dead_auditor: bool = False, **settings):
    from mnemoscope.audit.auditor import Auditor
    from mnemoscope.models.endpoint import EndpointClient, EndpointConfig
    from mnemoscope.server.proxy import ProxySettings, create_proxy_app
    from mnemoscope.server.storage import open_store

    client = EndpointClient(EndpointConfig(llama_server.base_url, concurrency=1, timeout=300))
    auditor = Auditor.from_endpoint(client, endpoint_profile)
    if dead_auditor:  # the auditing server goes away after start-up
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        dead = EndpointClient(EndpointConfig(f"http://127.0.0.1:{port}/v1", retries=0, timeout=5))
        dead._caps = client.capabilities()
        dead._model = client.model
        auditor.backend.client = dead  # the backend traces through its own client
    app = create_proxy_app(
        ProxySettings(upstream=llama_server.base_url, **settings), auditor=auditor, store=open_store(db)
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
    # the proxy asked the upstream for the answer's log-probs (the audit scores the no-context path
    # only) and removed them: the application did not ask for any
    assert r.choices[0].logprobs is None
    assert any("from the served response" in n for n in r.model_extra["mnemoscope"]["notes"])
    head = json.loads(raw.headers["x-mnemoscope-audit"])
    assert head["status"] == "audited" and head["source"] in (
        "context",
        "memory",
        "mixed",
        "unsupported",
        "undetermined",
    )
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


def test_no_context_found_is_undetermined_and_other_routes_pass(llama_server, proxy):
    c = _openai(proxy.base_url)
    raw = c.completions.with_raw_response.create(
        model="smollm2", prompt="1, 2, 3,", temperature=0, max_tokens=4
    )
    direct = _openai(llama_server.base_url).completions.create(
        model="smollm2", prompt="1, 2, 3,", temperature=0, max_tokens=4
    )
    assert raw.parse().choices[0].text == direct.choices[0].text
    head = json.loads(raw.headers["x-mnemoscope-audit"])
    assert head["status"] == "undetermined" and "could not be located" in head["reason"]
    assert raw.parse().model_extra["mnemoscope"]["id"] == head["id"]  # logged, and returned
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


def test_the_apps_own_prompt_is_audited_system_fewshot_history(llama_server, proxy):
    """System prompt + a few-shot turn + history, through the official client: the audited
    with-context prompt is these messages, the no-context one the same without the context."""
    from mnemoscope.server.storage import open_store

    direct = _openai(llama_server.base_url).chat.completions.create(
        model="smollm2", messages=APP_MESSAGES, temperature=0, max_tokens=24
    )
    r = _openai(proxy.base_url).chat.completions.create(
        model="smollm2", messages=APP_MESSAGES, temperature=0, max_tokens=24
    )  # no mnemoscope object: the default layout finds the 'Context:' block of the last user turn
    assert r.choices[0].message.content == direct.choices[0].message.content
    audit = r.model_extra["mnemoscope"]
    assert audit["status"] == "audited", audit
    assert audit["layout"]["layout"] == "user" and audit["layout"]["message"] == 3
    assert audit["layout"]["calibrated"] is True and isinstance(audit["memory_flag"], bool)
    store = open_store(proxy.db, readonly=True)
    try:
        assert store.get(audit["id"])["layout"]["how"] == "default: 'Context:' block"
    finally:
        store.close()


def test_stream_verdict_event_follows_done(llama_server, proxy):
    import httpx

    from mnemoscope.server.proxy_stream import read_verdict_event, sse_answer

    body = {"model": "smollm2", "messages": APP_MESSAGES, "temperature": 0, "max_tokens": 16, "stream": True}
    with httpx.stream("POST", f"{proxy.base_url}/chat/completions", json=body, timeout=600) as r:
        aid = r.headers["x-mnemoscope-audit-id"]
        raw = b"".join(r.iter_raw())
    before, _, after = raw.partition(b"data: [DONE]")
    ev = read_verdict_event(after)
    assert (
        ev is not None
        and ev["id"] == aid
        and ev["status"] == "audited"
        and ev["answer"] == sse_answer(before)
    )


def test_layout_the_profile_was_not_calibrated_for_is_refused(llama_server, proxy):
    msgs = [
        {"role": "system", "content": f"Answer from the documents.\n<context>{CTX}</context>"},
        {"role": "user", "content": QUERY},
    ]
    direct = _openai(llama_server.base_url).chat.completions.create(
        model="smollm2", messages=msgs, temperature=0, max_tokens=16
    )
    r = _openai(proxy.base_url).chat.completions.create(
        model="smollm2", messages=msgs, temperature=0, max_tokens=16
    )
    assert r.choices[0].message.content == direct.choices[0].message.content
    audit = r.model_extra["mnemoscope"]
    assert audit["status"] == "refused" and "--accept-layout system" in audit["reason"]


def test_full_audit_queue_sheds_and_the_answers_still_pass(llama_server, endpoint_profile, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    p = _proxy(llama_server, endpoint_profile, tmp_path / "audit.db", audit_queue=1)
    try:
        c = _openai(p.base_url)

        def ask(_):
            return c.chat.completions.create(model="smollm2", messages=MESSAGES, temperature=0, max_tokens=8)

        with ThreadPoolExecutor(4) as ex:
            rs = list(ex.map(ask, range(4)))
        statuses = [r.model_extra["mnemoscope"]["status"] for r in rs]
        assert all(r.choices[0].message.content for r in rs)
        assert "skipped" in statuses and "audited" in statuses, statuses
        shed = next(
            r.model_extra["mnemoscope"] for r in rs if r.model_extra["mnemoscope"]["status"] == "skipped"
        )
        assert "audit queue full" in shed["reason"] and shed["seq"] >= 1  # visible: returned and logged
    finally:
        p.stop()


def test_slow_real_upstream_times_out_and_is_logged(llama_server, endpoint_profile, tmp_path):
    p = _proxy(llama_server, endpoint_profile, tmp_path / "audit.db", timeout=0.05)
    try:
        import httpx

        r = httpx.post(
            f"{p.base_url}/chat/completions",
            json={"model": "smollm2", "messages": MESSAGES, "max_tokens": 200, "temperature": 0},
            timeout=60,
        )
        assert r.status_code == 504 and "timed out" in r.json()["error"]["message"]
        head = json.loads(r.headers["x-mnemoscope-audit"])
        assert head["status"] == "failed" and "timed out" in head["error"]
    finally:
        p.stop()


def test_audit_wait_returns_the_answer_pending_and_logs_the_audit_later(
    llama_server, endpoint_profile, tmp_path
):
    import httpx

    p = _proxy(llama_server, endpoint_profile, tmp_path / "audit.db", audit_wait=0.01)
    try:
        r = _openai(p.base_url).chat.completions.create(
            model="smollm2", messages=MESSAGES, temperature=0, max_tokens=16
        )
        pending = r.model_extra["mnemoscope"]
        assert pending["status"] == "pending" and "--audit-wait" in pending["reason"]
        deadline = time.monotonic() + 600
        while (
            g := httpx.get(f"http://127.0.0.1:{p.port}/mnemoscope/audits/{pending['id']}", timeout=10)
        ).status_code != 200:
            assert time.monotonic() < deadline, "the pending audit was never logged"
            time.sleep(0.5)
        assert g.json()["status"] == "audited" and g.json()["answer"] == r.choices[0].message.content
    finally:
        p.stop()


# -- the drift watch (GET /mnemoscope/metrics) --------------------------------------------------------


def test_metrics_route_counts_audits_and_says_why_drift_is_not_watched(proxy):
    import httpx

    from mnemoscope.server.profile_view import NO_REFERENCE

    _openai(proxy.base_url).chat.completions.create(
        model="smollm2", messages=MESSAGES, temperature=0, max_tokens=8
    )
    r = httpx.get(proxy.base_url[: -len("/v1")] + "/mnemoscope/metrics", timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert prom_series(r.text, "mnemoscope_proxy_audits_total")['{status="audited"}'] >= 1
    # the test profile is calibrated on 10 items: too few held-out answers to compare with
    ((reason, watched),) = prom_series(r.text, "mnemoscope_drift_watched").items()
    assert watched == 0 and NO_REFERENCE in reason
    assert prom_series(r.text, "mnemoscope_drift_state")['{state="not watched"}'] == 1
    assert not prom_series(r.text, "mnemoscope_drift_p_value")


def test_drift_window_of_real_audits_reaches_the_metrics(llama_server, endpoint_profile, tmp_path):
    """The endpoint profile given a reference sample (the committed held-out audits of the same
    SmolLM2, written with the calibration's own writer): 20 audited answers fill one window, and
    only then do the p-values appear."""
    import shutil
    from pathlib import Path

    import httpx

    from mnemoscope.audit.profile import load_profile
    from mnemoscope.audit.validation import read_held_out, write_validation

    folder = tmp_path / "profile"
    shutil.copytree(Path(str(endpoint_profile.path)), folder)
    held = Path(__file__).resolve().parents[1] / "benchmarks/results/calibration/smollm2-135m-instruct-pc300"
    write_validation(
        folder, load_profile(folder, backend="endpoint"), read_held_out(held), labels={}, split={},
        calibration_seconds=0.0, audit_seconds=None,
    )  # fmt: skip
    prof = load_profile(folder, backend="endpoint")
    assert prof.validation is not None
    p = _proxy(llama_server, prof, tmp_path / "audit.db", drift_window=20)
    try:
        url = p.base_url[: -len("/v1")] + "/mnemoscope/metrics"
        c = _openai(p.base_url)
        for i in range(20):
            ctx = f"Velmor{i} is a village on the coast. The lighthouse of Velmor{i} is painted {'red' if i % 2 else 'blue'}."
            msgs = [
                {
                    "role": "user",
                    "content": f"Context: {ctx}\n\nQuestion: What colour is the lighthouse of Velmor{i}?\n\nAnswer:",
                }
            ]
            got = c.chat.completions.create(model="smollm2", messages=msgs, temperature=0, max_tokens=16)
            assert got.model_extra["mnemoscope"]["status"] == "audited", got.model_extra["mnemoscope"]
            if i == 18:
                text = httpx.get(url, timeout=30).text
                assert prom_series(text, "mnemoscope_drift_state")['{state="not enough answers yet"}'] == 1
                assert prom_series(text, "mnemoscope_drift_window_answers")[""] == 19
                assert not prom_series(text, "mnemoscope_drift_p_value")
        text = httpx.get(url, timeout=30).text
        assert prom_series(text, "mnemoscope_drift_windows_total")[""] == 1
        pv = prom_series(text, "mnemoscope_drift_p_value")
        assert {'{test="p_memory"}', '{test="flag_rate"}'} <= set(pv) and all(
            0 <= v <= 1 for v in pv.values()
        )
        assert prom_series(text, "mnemoscope_drift_reference_answers")[""] == 221
    finally:
        p.stop()
