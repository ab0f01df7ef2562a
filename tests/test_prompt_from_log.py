"""``calibrate --prompt-from-log LOG``: the proxy logs each request's skeleton (its messages with
``{context}`` and ``{query}`` where the context was located and the question is), and calibrate
groups a log's skeletons by fingerprint and calibrates on the most common one (issue 36)."""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import socket
import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from helpers import zor_records
from mnemoscope.audit.layout import Located
from mnemoscope.audit.prompt_match import locate_for_profile, match_prompt, skeleton_of, template_groups
from mnemoscope.trace.app_prompt import AppPrompt, parse_app_prompt
from mnemoscope.trace.templates import PromptBuilder

DOCS = "The Zorblat 3000 kettle boils one litre in 40 seconds."
QUESTION = "How fast does the Zorblat 3000 boil a litre?"
SYSTEM = "You are Acme's help desk. Answer in one sentence, from the documents only."


def _located(body: dict[str, Any], app: AppPrompt | None = None, **kw: Any) -> Located:
    header = {"prompt": PromptBuilder(app=app).to_dict()} if app is not None else {}
    loc = locate_for_profile(body, header, **kw)
    assert not isinstance(loc, str), loc
    return loc


def _skeleton(body: dict[str, Any], app: AppPrompt | None = None, **kw: Any) -> AppPrompt:
    sk = skeleton_of(_located(body, app, **kw), app)
    assert isinstance(sk, AppPrompt), sk
    return sk


def _roundtrip(sk: AppPrompt, body: dict[str, Any], context: str, question: str) -> None:
    """The skeleton filled with the request's context and question is the request again."""
    if "prompt" in body:
        assert sk.render(context, question) == body["prompt"]
    else:
        assert sk.render(context, question) == [
            {"role": m["role"], "content": m["content"]} for m in body["messages"]
        ]


# -- (a) the skeleton, layout by layout ------------------------------------------------------------


def test_context_in_the_user_message_with_its_labels():
    body = {"messages": [{"role": "user", "content": f"Context: {DOCS}\n\nQuestion: {QUESTION}\n\nAnswer:"}]}
    sk = _skeleton(body)
    assert sk.messages == (("user", "Context: {context}\n\nQuestion: {query}\n\nAnswer:"),)
    assert sk.layout == "user"
    _roundtrip(sk, body, DOCS, QUESTION)
    # tags, the question after them or before them
    for content, want in [
        (f"<context>{DOCS}</context>\n{QUESTION}", "<context>{context}</context>\n{query}"),
        (
            f"{QUESTION}\n\n<documents>\n{DOCS}\n</documents>",
            "{query}\n\n<documents>\n{context}\n</documents>",  # the newlines are the app's
        ),
        (f"{QUESTION}\n\nContext: {DOCS}", "{query}\n\nContext: {context}"),
    ]:
        b = {"messages": [{"role": "user", "content": content}]}
        loc = _located(b)
        s2 = skeleton_of(loc)
        assert isinstance(s2, AppPrompt) and s2.messages == (("user", want),), content
        _roundtrip(s2, b, DOCS, QUESTION)


def test_context_in_the_system_message_and_the_question_alone():
    body = {
        "messages": [
            {"role": "system", "content": f"{SYSTEM}\n<docs>{DOCS}</docs>\nBe brief."},
            {"role": "user", "content": QUESTION},
        ]
    }
    sk = _skeleton(body)
    assert sk.messages == (("system", SYSTEM + "\n<docs>{context}</docs>\nBe brief."), ("user", "{query}"))
    assert sk.layout == "system"
    _roundtrip(sk, body, DOCS, QUESTION)


def test_context_in_a_separate_message_named_or_by_role():
    body = {
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "tool", "content": DOCS},
            {"role": "user", "content": f"Question: {QUESTION}"},
        ]
    }
    sk = _skeleton(body, context_role="tool")
    assert sk.messages == (("system", SYSTEM), ("tool", "{context}"), ("user", "Question: {query}"))
    assert sk.layout == "message:tool"
    _roundtrip(sk, body, DOCS, QUESTION)
    named = _skeleton(body, spec={"message": 1})
    assert named.fingerprint() == sk.fingerprint()


def test_few_shot_turns_stay_verbatim_and_only_the_question_varies():
    def req(docs: str, question: str) -> dict[str, Any]:
        return {
            "messages": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": "<context>Paris is in France.</context>\nWhere is Paris?"},
                {"role": "assistant", "content": "In France."},
                {"role": "user", "content": f"<context>{docs}</context>\n{question}"},
            ]
        }

    a, b = req(DOCS, QUESTION), req("Ka3 is a river in Zor.", "Which river is in Zor?")
    sa, sb = _skeleton(a), _skeleton(b)
    assert sa.messages is not None and sa.messages[:3] == tuple(
        (m["role"], m["content"]) for m in a["messages"][:3]
    )
    assert sa.messages[3] == ("user", "<context>{context}</context>\n{query}")
    assert sa.fingerprint() == sb.fingerprint()  # one template, two requests
    _roundtrip(sa, a, DOCS, QUESTION)


def test_history_turns_are_verbatim_so_each_history_is_its_own_template():
    first = {"messages": [{"role": "system", "content": f"{SYSTEM}\nDocuments:\n{DOCS}"}, {"role": "user", "content": QUESTION}]}  # fmt: skip
    later = {
        "messages": [
            first["messages"][0],
            {"role": "user", "content": "Who makes it?"},
            {"role": "assistant", "content": "Acme."},
            {"role": "user", "content": QUESTION},
        ]
    }
    s1, s2 = _skeleton(first), _skeleton(later)
    assert s2.messages is not None and s2.messages[1:3] == (("user", "Who makes it?"), ("assistant", "Acme."))
    assert s2.messages[3] == ("user", "{query}") and s1.messages == (s2.messages[0], s2.messages[3])
    assert s1.fingerprint()["sha256"] != s2.fingerprint()["sha256"]
    _roundtrip(s2, later, DOCS, QUESTION)


def test_a_completion_prompt():
    body = {"prompt": f"Context: {DOCS}\nQuestion: {QUESTION}\nAnswer:"}
    sk = _skeleton(body)
    assert sk.prompt == "Context: {context}\nQuestion: {query}\nAnswer:" and sk.layout == "prompt"
    _roundtrip(sk, body, DOCS, QUESTION)


def test_a_request_that_follows_the_calibrated_prompt_has_it_as_its_skeleton():
    """With the profile's calibrated prompt the question is where its {query} is: a wrapper the
    rules alone would take for part of the question ("Reply briefly.") stays fixed text."""
    app = parse_app_prompt(
        [
            {"role": "system", "content": SYSTEM + "\n\nDocuments:\n{context}"},
            {"role": "user", "content": "{query}\nReply briefly."},
        ]
    )
    body = {
        "messages": [
            {"role": "system", "content": SYSTEM + "\n\nDocuments:\n" + DOCS},
            {"role": "user", "content": QUESTION + "\nReply briefly."},
        ]
    }
    loc = _located(body, app)
    assert loc.prompt is not None and loc.prompt["status"] == "calibrated"
    sk = skeleton_of(loc, app)
    assert isinstance(sk, AppPrompt) and sk.fingerprint() == app.fingerprint()
    _roundtrip(sk, body, DOCS, QUESTION)
    rules = skeleton_of(loc)  # without the calibrated prompt: the whole user turn is the question
    assert (
        isinstance(rules, AppPrompt)
        and rules.messages is not None
        and rules.messages[1] == ("user", "{query}")
    )
    # another system prompt, the same query turn: still the calibrated prompt's {query}
    other = {
        "messages": [
            {"role": "system", "content": "Be a pirate.\n\nDocuments:\n" + DOCS},
            body["messages"][1],
        ]
    }
    loc2 = match_prompt(other, app)  # other instructions, the same "Documents:" delimiter
    assert not isinstance(loc2, str) and loc2.prompt is not None and loc2.prompt["status"] == "different"
    sk2 = skeleton_of(loc2, app)
    assert isinstance(sk2, AppPrompt) and sk2.messages == (
        ("system", "Be a pirate.\n\nDocuments:\n{context}"),
        ("user", "{query}\nReply briefly."),
    )
    tagged = {"messages": [{"role": "system", "content": f"Be a pirate.\n<context>{DOCS}</context>"}, body["messages"][1]]}  # fmt: skip
    loc3 = _located(tagged, app)
    assert loc3.prompt is not None and loc3.prompt["status"] == "different"
    sk3 = skeleton_of(loc3, app)
    assert isinstance(sk3, AppPrompt) and sk3.messages == (
        ("system", "Be a pirate.\n<context>{context}</context>"),
        ("user", "{query}\nReply briefly."),
    )


def test_no_skeleton_when_the_prompt_cannot_be_a_template():
    braces = {"messages": [{"role": "system", "content": "Fill {query} in."}, {"role": "user", "content": f"<context>{DOCS}</context>\n{QUESTION}"}]}  # fmt: skip
    why = skeleton_of(_located(braces))
    assert isinstance(why, str) and "cannot be a template" in why and "{query}" in why
    only_docs = {"messages": [{"role": "user", "content": f"<context>{DOCS}</context>"}]}
    assert skeleton_of(_located(only_docs)) == "no question besides the context in the query's message"
    no_user = {"messages": [{"role": "system", "content": f"<context>{DOCS}</context>"}]}
    assert skeleton_of(_located(no_user)) == "no 'user' message holds a question"


def test_template_groups_count_share_and_skip_forged_templates():
    one = _skeleton({"messages": [{"role": "user", "content": f"Context: {DOCS}\n\nQuestion: {QUESTION}"}]})
    two = _skeleton({"messages": [{"role": "system", "content": f"<docs>{DOCS}</docs>"}, {"role": "user", "content": QUESTION}]})  # fmt: skip

    def rec(app: AppPrompt, t: float, status: str = "audited") -> dict[str, Any]:
        d = app.to_dict()
        d.pop("source")
        return {"status": status, "created_at": t, "prompt_template": d}

    forged = rec(one, 9.0)
    forged["prompt_template"]["messages"][0]["content"] += " (edited)"
    recs = [rec(one, 1.0), rec(two, 2.0, "refused"), rec(one, 3.0), forged, {"status": "undetermined"}]
    groups, bad = template_groups(recs)
    assert bad == 1 and [g.count for g in groups] == [2, 1]
    assert groups[0].sha256 == one.fingerprint()["sha256"] and groups[0].share == pytest.approx(2 / 3)
    assert groups[0].newest == 3.0 and groups[0].oldest == 1.0 and groups[1].statuses == {"refused": 1}
    assert groups[1].system_text() == "<docs>{context}</docs>"


# -- (b) the proxy logs the skeleton ---------------------------------------------------------------

ANSWER = "It boils a litre in 40 seconds."
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
#: the application's prompt: documents in the last user turn, after a system prompt
APP_A = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "<context>\n{context}\n</context>\n\nQuestion: {query}"},
]
#: a second feature of the app: the documents in the system message
APP_B = [
    {"role": "system", "content": SYSTEM + "\n\nDocuments:\n{context}"},
    {"role": "user", "content": "{query}"},
]


def _body(app: list[dict[str, str]], docs: str, question: str) -> dict[str, Any]:
    msgs = parse_app_prompt(app).render(docs, question)
    return {"model": "m", "messages": msgs}


class _Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps(
            {
                "id": "c1",
                "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWER}}],
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@dataclasses.dataclass
class _Result:
    """What the proxy records of an audit (the verdict is not this test's subject)."""

    notes: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"source": "context", "memory_flag": False, "p_memory": 0.1, "notes": list(self.notes)}


class _StubAuditor:
    """An endpoint auditor's surface as the proxy uses it, with a template-calibrated profile
    (layout ``user``): the skeleton comes from the proxy's located context, not from the audit."""

    def __init__(self, folder: Path):
        from mnemoscope.trace.chat_template import ChatTemplate

        self.profile = SimpleNamespace(
            header={"prompt": PromptBuilder(chat=True).to_dict()},
            path=folder,
            content_hash="0" * 64,
            validation=None,
        )
        pc = SimpleNamespace(template=ChatTemplate(TEMPLATE, source="test"), top_k=5)
        self.backend = SimpleNamespace(settings=SimpleNamespace(pair_config=pc))
        self.model_info = {"name": "stub"}

    def audit(self, requests: list[Any]) -> list[Any]:
        return [_Result([]) for _ in requests]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def proxy_log(tmp_path_factory):
    """A proxy log written by the real proxy app (real HTTP, real store) in front of a fake
    upstream: 3 requests of APP_A, one of APP_B (refused: the profile's layout is ``user``), one of
    APP_A with a history turn, one without a locatable context. Returns (db, records by name)."""
    import uvicorn

    from mnemoscope.server.proxy import ProxySettings, create_proxy_app
    from mnemoscope.server.storage import open_store

    folder = tmp_path_factory.mktemp("proxy-log")
    up = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    up.daemon_threads = True
    threading.Thread(target=up.serve_forever, daemon=True).start()
    db = folder / "audits.db"
    app = create_proxy_app(
        ProxySettings(upstream=f"http://127.0.0.1:{up.server_address[1]}/v1"),
        auditor=_StubAuditor(folder),
        store=open_store(db),
    )
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "proxy did not start"
        time.sleep(0.02)
    history = _body(APP_A, DOCS, QUESTION)
    history["messages"][1:1] = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi."}]
    sent = {
        "a1": _body(APP_A, DOCS, QUESTION),
        "a2": _body(APP_A, "Ka3 is a river in Zor.", "Which river is in Zor?"),
        "b": _body(APP_B, DOCS, QUESTION),
        "a3": _body(APP_A, "Quenmar lies on the Zorblat.", "Where is Quenmar?"),
        "history": history,
        "nocontext": {"model": "m", "messages": [{"role": "user", "content": "Hello there"}]},
    }
    out: dict[str, dict[str, Any]] = {}
    try:
        for name, body in sent.items():
            r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=30)
            assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == ANSWER
            out[name] = r.json()["mnemoscope"]
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        up.shutdown()
        up.server_close()
    return db, out


def test_the_proxy_logs_the_skeleton_of_every_located_request(proxy_log):
    from mnemoscope.server.storage import open_store

    db, out = proxy_log
    assert {k: v["status"] for k, v in out.items()} == {
        "a1": "audited", "a2": "audited", "b": "refused", "a3": "audited", "history": "audited",
        "nocontext": "undetermined",
    }  # fmt: skip
    sha_a = parse_app_prompt(APP_A).fingerprint()["sha256"]
    store = open_store(db, readonly=True)
    try:
        logged = {k: store.get(v["id"]) for k, v in out.items()}
        assert store.verify().ok  # the new field is hashed and chained like any other
    finally:
        store.close()
    for name in ("a1", "a2", "a3"):
        tpl = logged[name]["prompt_template"]
        assert tpl["fingerprint"]["sha256"] == sha_a and tpl["messages"] == APP_A
        assert DOCS not in json.dumps(tpl) and "Which river" not in json.dumps(
            tpl
        )  # no documents, no question
    assert logged["b"]["prompt_template"]["messages"] == APP_B  # refused for its layout: still the app's
    assert logged["history"]["prompt_template"]["fingerprint"]["sha256"] != sha_a
    assert "prompt_template" not in logged["nocontext"]  # nothing located, no skeleton


def test_a_real_audit_logs_the_apps_template(llama_server, endpoint_profile, tmp_path):
    """The same with the real llama.cpp server and a real endpoint auditor (skipped without them)."""
    from mnemoscope.cli.calibrate_cmd import app_prompt_from_log
    from test_proxy import _openai, _proxy

    db = tmp_path / "audits.db"
    p = _proxy(llama_server, endpoint_profile, db)
    try:
        msgs = parse_app_prompt(APP_A).render(DOCS, QUESTION)
        r = _openai(p.base_url).chat.completions.create(
            model="smollm2", messages=msgs, temperature=0, max_tokens=16
        )
    finally:
        p.stop()
    audit = r.model_extra["mnemoscope"]
    sha_a = parse_app_prompt(APP_A).fingerprint()["sha256"]
    assert audit["status"] == "audited" and audit["prompt_template"]["fingerprint"]["sha256"] == sha_a
    app, origin = app_prompt_from_log(str(db), out=io.StringIO())
    assert app.fingerprint()["sha256"] == sha_a and origin["statuses"] == {"audited": 1}


# -- (c) calibrate --prompt-from-log ---------------------------------------------------------------


def _records(path: Path, n: int) -> Path:
    rows = [{"id": r.id, "context": r.context, "query": r.query, "label": r.label, **(r.extra or {})} for r in zor_records(n)]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _args(**kw: Any) -> argparse.Namespace:
    return argparse.Namespace(
        **{"prompt": None, "prompt_from_log": None, "log_sample": None, "log_template": None, **kw}
    )


def test_the_log_and_the_equivalent_file_give_one_prompt(proxy_log, tmp_path):
    from mnemoscope.cli.calibrate_cmd import app_prompt_from_args, app_prompt_from_log

    db, _ = proxy_log
    f = tmp_path / "app.json"
    f.write_text(json.dumps(APP_A), encoding="utf-8")
    from_file, no_origin = app_prompt_from_args(_args(prompt=str(f)))
    from_log, origin = app_prompt_from_args(_args(prompt_from_log=str(db)))
    assert no_origin is None and from_log.fingerprint() == from_file.fingerprint()
    assert from_log.source == f"proxy log {db}"
    assert origin is not None
    assert (origin["sample"], origin["count"], origin["n_templates"], origin["share"]) == (5, 3, 3, 0.6)
    assert origin["template"] == from_file.fingerprint()["sha256"] and origin["statuses"] == {"audited": 3}
    # another template, by a prefix of its fingerprint: covering a fifth of the sample, said so
    sha_b = parse_app_prompt(APP_B).fingerprint()["sha256"]
    said = io.StringIO()
    b, origin_b = app_prompt_from_log(str(db), template=sha_b[:10], out=said)
    assert b.fingerprint()["sha256"] == sha_b and origin_b["share"] == 0.2
    text = said.getvalue()
    assert "5 logged requests with a prompt template" in text and "3 templates" in text
    assert f"{sha_b[:12]}      1 ( 20.0%)  layout system  roles system,user  system: " in text
    assert "covers only 20.0% of the sample" in text
    # the sample is the most recent requests with a template: a3 and the history one (a tie: the newest)
    _, last2 = app_prompt_from_log(str(db), sample=2, out=io.StringIO())
    assert last2["sample"] == 2 and last2["records_read"] == 3 and last2["count"] == 1


def test_calibrate_from_the_proxy_log_end_to_end(proxy_log, tiny_folder, tmp_path, capsys):
    """The whole path: the proxy's log -> calibrate --prompt-from-log on a tiny model -> a profile
    calibrated on the app's prompt, which the restarted proxy would match requests against."""
    from mnemoscope.cli.main import main

    db, _ = proxy_log
    out = tmp_path / "p"
    argv = ["calibrate", "--model", str(tiny_folder), "--input", str(_records(tmp_path / "r.jsonl", 24)),
            "--out", str(out), "-T", "4", "--labels", "given", "--held-out-fraction", "0", "--threads", "1",
            "--prompt-from-log", str(db)]  # fmt: skip
    assert main(["--quiet", *argv]) == 0
    err = capsys.readouterr().err
    sha_a = parse_app_prompt(APP_A).fingerprint()["sha256"]
    assert (
        f"calibrating on template {sha_a[:12]} (3 of 5 requests, 60.0%)" in err and "covers only" not in err
    )
    header = json.loads((out / "profile.json").read_text())
    assert header["prompt"]["app"]["fingerprint"]["sha256"] == sha_a
    assert (
        header["prompt"]["app"]["messages"] == APP_A
        and header["layout"]["prompt"]["app"]["source"] == f"proxy log {db}"
    )
    assert header["prompt_origin"]["log"] == str(db) and header["prompt_origin"]["share"] == 0.6
    # the same as --prompt FILE with the equivalent file, but for where it came from
    f = tmp_path / "app.json"
    f.write_text(json.dumps(APP_A), encoding="utf-8")
    by_file = tmp_path / "by-file"
    argv_file = [*argv[: argv.index("--out")], "--out", str(by_file), *argv[argv.index("--out") + 2 : -2]]
    assert main(["--quiet", *argv_file, "--prompt", str(f)]) == 0
    capsys.readouterr()
    file_header = json.loads((by_file / "profile.json").read_text())
    assert file_header["prompt"]["app"]["fingerprint"] == header["prompt"]["app"]["fingerprint"]
    assert {**file_header["prompt"]["app"], "source": None} == {**header["prompt"]["app"], "source": None}
    assert "prompt_origin" not in file_header
    # the proxy restarted with this profile finds the context by the placeholder: "calibrated"
    loc = locate_for_profile(_body(APP_A, "Ka1 flows north.", "Which way does Ka1 flow?"), header)
    assert not isinstance(loc, str) and loc.prompt is not None and loc.prompt["status"] == "calibrated"
    assert loc.context == "Ka1 flows north."


# -- (d) bad input, all before any model loads -----------------------------------------------------


def _fails(argv: list[str], capsys: Any, tmp_path: Path) -> str:
    from mnemoscope.cli.main import main

    rc = main(["calibrate", "--model", str(tmp_path / "no-such-model"), "--out", str(tmp_path / "p"), *argv])
    err = capsys.readouterr().err
    assert rc != 0, err
    assert "no-such-model" not in err  # refused before the model is looked at
    return err


def test_bad_logs_are_refused_naming_the_log(proxy_log, tmp_path, capsys):
    from mnemoscope.server.storage import open_store

    missing = tmp_path / "nope.db"
    err = _fails(["--prompt-from-log", str(missing)], capsys, tmp_path)
    assert f"--prompt-from-log {missing}: cannot read the audit log" in err
    junk = tmp_path / "junk.db"
    junk.write_text("not a database", encoding="utf-8")
    assert f"--prompt-from-log {junk}: cannot read the audit log" in _fails(
        ["--prompt-from-log", str(junk)], capsys, tmp_path
    )
    empty = tmp_path / "empty.db"
    open_store(empty).close()
    assert "the log holds no records" in _fails(["--prompt-from-log", str(empty)], capsys, tmp_path)
    # a log with only requests whose context was not located (or written before the skeletons)
    old = tmp_path / "old.db"
    st = open_store(old)
    st.append(
        [
            {"id": f"u{i}", "created_at": 1.0 + i, "status": "undetermined", "source": "undetermined"}
            for i in range(3)
        ]
    )
    st.close()
    err = _fails(["--prompt-from-log", str(old)], capsys, tmp_path)
    assert "no logged request with a prompt template (none among its 3 most recent records" in err
    assert "--prompt FILE" in err
    schema1 = tmp_path / "schema1.db"
    con = sqlite3.connect(schema1)
    con.execute("CREATE TABLE audits (seq INTEGER PRIMARY KEY, id TEXT, content TEXT)")
    con.commit()
    con.close()
    assert "written before the proxy logged prompt templates" in _fails(
        ["--prompt-from-log", str(schema1)], capsys, tmp_path
    )


def test_bad_template_choices_and_flags(proxy_log, tmp_path, capsys):
    db, _ = proxy_log
    err = _fails(["--prompt-from-log", str(db), "--log-template", "ffff0000"], capsys, tmp_path)
    sha_a = parse_app_prompt(APP_A).fingerprint()["sha256"]
    assert "--log-template ffff0000 matches none of the 3 templates" in err and f"{sha_a[:12]} (3)" in err
    assert "--log-sample must be at least 1" in _fails(
        ["--prompt-from-log", str(db), "--log-sample", "0"], capsys, tmp_path
    )
    assert "--log-template goes with --prompt-from-log" in _fails(["--log-template", "ab"], capsys, tmp_path)
    f = tmp_path / "app.json"
    f.write_text(json.dumps(APP_A), encoding="utf-8")
    with pytest.raises(SystemExit):
        _fails(["--prompt", str(f), "--prompt-from-log", str(db)], capsys, tmp_path)
    assert "not allowed with argument" in capsys.readouterr().err


def test_log_names_drop_credentials():
    from mnemoscope.cli.calibrate_cmd import log_name

    assert log_name("postgresql://app:s3cret@db.example:5432/audits?sslmode=require&password=x") == (
        "postgresql://db.example:5432/audits"
    )
    assert log_name("/var/lib/proxy/audits.db") == "/var/lib/proxy/audits.db"
