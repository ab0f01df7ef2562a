"""The application's own prompt: ``calibrate --prompt FILE`` and the proxy's comparison (issue 36)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mnemoscope.audit.layout import LayoutMismatch, check_layout, profile_layout
from mnemoscope.audit.prompt_match import (
    NO_CONTEXT,
    app_prompt_of,
    locate_for_profile,
    match_prompt,
    span_by_delimiters,
)
from mnemoscope.errors import InputError
from mnemoscope.trace.app_prompt import AppPrompt, load_app_prompt, parse_app_prompt
from mnemoscope.trace.chat_template import ChatTemplate
from mnemoscope.trace.templates import PromptBuilder

SYSTEM = (
    "You are the help desk of Acme. Answer only from the documents below, in one sentence.\n\nDocuments:\n"
)
APP = [
    {"role": "system", "content": SYSTEM + "{context}"},
    {"role": "user", "content": "Which product is it about? Reply briefly."},
    {"role": "assistant", "content": "The Acme kettle."},
    {"role": "user", "content": "{query}"},
]
CTX = 'The Zorblat 3000 kettle boils {"water": 1} litre in 40 s.\n\nQuestion: not the real question'
QUERY = "How fast does the Zorblat 3000 boil a litre?"
TPL = ChatTemplate(
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}",
    source="test",
)


def _app() -> AppPrompt:
    return parse_app_prompt(APP, source="app.json")


def _request(system: str = SYSTEM, context: str = CTX, query: str = QUERY, history: int = 0) -> dict:
    msgs = [
        {"role": "system", "content": system + context},
        {"role": "user", "content": "Which product is it about? Reply briefly."},
        {"role": "assistant", "content": "The Acme kettle."},
    ]
    for i in range(history):
        msgs += [{"role": "user", "content": f"earlier question {i}"}, {"role": "assistant", "content": "ok"}]
    return {"model": "m", "messages": [*msgs, {"role": "user", "content": query}]}


# -- the file -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ('[{"role": "user", "content": "{query}"}]', r"app\.json has no \{context\} placeholder"),
        (
            '[{"role": "system", "content": "{context} {context}"}, {"role": "user", "content": "{query}"}]',
            r"app\.json has 2 times the \{context\}",
        ),
        ('[{"role": "user", "content": "{context} {query} {query}"}]', r"has 2 times the \{query\}"),
        ('[{"role": "user", "content": "{context}"', r"app\.json: not valid JSON \(line 1"),
        ('"just a string"', r"expected a JSON list of chat messages"),
        ('[{"role": "wizard", "content": "{context}{query}"}]', r"message 0 needs a 'role'"),
        (
            '[{"role": "user", "content": ["{context}{query}"]}]',
            r"message 0 \(user\) needs a string 'content'",
        ),
        ("[]", "the message list is empty"),
        ('{"prompt": 3}', "'prompt' must be a string"),
    ],
)
def test_a_bad_prompt_file_names_the_file_and_the_fault(tmp_path: Path, content: str, match: str):
    f = tmp_path / "app.json"
    f.write_text(content, encoding="utf-8")
    with pytest.raises(InputError, match=match):
        load_app_prompt(f)


def test_a_missing_prompt_file_is_an_input_error(tmp_path: Path):
    with pytest.raises(InputError, match=r"--prompt .*nope\.json: cannot read it"):
        load_app_prompt(tmp_path / "nope.json")


def test_the_file_forms_and_the_layouts(tmp_path: Path):
    f = tmp_path / "app.json"
    f.write_text(json.dumps({"messages": APP}), encoding="utf-8")
    p = load_app_prompt(f)
    assert p.source == "app.json" and p.layout == "system" and p.context_message == 0 and p.query_message == 3
    user = parse_app_prompt([{"role": "user", "content": "Docs:\n{context}\n\nQ: {query}"}])
    assert user.layout == "user"
    separate = parse_app_prompt(
        [{"role": "user", "content": "{context}"}, {"role": "user", "content": "{query}"}]
    )
    assert separate.layout == "message:user-history"
    completion = parse_app_prompt({"prompt": "Docs: {context}\nQ: {query}\nA:"})
    assert completion.layout == "prompt" and not completion.is_chat


def test_render_fills_each_placeholder_once_and_removes_only_the_context():
    p = _app()
    with_ = p.render("ctx has {query} inside", QUERY)
    assert with_[0]["content"] == SYSTEM + "ctx has {query} inside"  # not substituted again
    without = p.render("", QUERY)
    assert without[0]["content"] == SYSTEM and without[1:] == with_[1:] and without[3]["content"] == QUERY
    assert '{"a": 1}' in parse_app_prompt([{"role": "user", "content": '{"a": 1} {context} {query}'}]).render("c", "q")[0]["content"]  # fmt: skip


def test_fingerprint_covers_the_fixed_text_and_the_roles_only():
    a, b = _app(), _app()
    assert a.fingerprint() == b.fingerprint()
    other = parse_app_prompt([{**APP[0], "content": "Be terse.\n{context}"}, *APP[1:]])
    assert other.fingerprint()["sha256"] != a.fingerprint()["sha256"]
    assert AppPrompt.from_dict(json.loads(json.dumps(a.to_dict()))) == a


def test_the_builder_traces_the_app_prompt_with_and_without_the_context():
    b = PromptBuilder(app=_app())
    assert b.chat  # chat messages: wrapped by the chat template
    p_with, p_without = b.pair(CTX, QUERY, TPL)
    assert p_with == TPL.apply_chat_template(_app().render(CTX, QUERY))
    assert p_with.replace(CTX, "", 1) == p_without
    assert b.to_dict()["app"]["fingerprint"]["layout"] == "system"
    assert "app" not in PromptBuilder().to_dict()  # the template's prompt block is unchanged
    plain = PromptBuilder(app=parse_app_prompt({"prompt": "Docs: {context}\nQ: {query}\nA:"}))
    assert not plain.chat and plain.pair("c", "q") == ("Docs: c\nQ: q\nA:", "Docs: \nQ: q\nA:")


# -- a request against the calibrated prompt --------------------------------------------------------


def test_the_same_prompt_is_calibrated_and_the_context_is_found_by_its_placeholder():
    loc = match_prompt(_request(), _app())
    assert not isinstance(loc, str)
    assert loc.context == CTX and loc.layout == "system" and loc.message == 0
    assert loc.prompt is not None and loc.prompt["status"] == "calibrated" and loc.prompt["differs"] == []
    assert loc.messages_without is not None and loc.messages_without[0]["content"] == SYSTEM
    assert loc.to_dict()["prompt"]["status"] == "calibrated"


def test_another_system_prompt_or_history_is_audited_as_not_the_calibrated_prompt():
    other = _request(system="You are a pirate. Documents:\n")
    loc = match_prompt(other, _app())
    assert isinstance(loc, str) and "around {context}" in loc  # the placeholder's surroundings differ
    header = {"prompt": PromptBuilder(app=_app()).to_dict()}
    found = locate_for_profile({**other, "messages": [{**other["messages"][0], "content": "Be a pirate. <context>" + CTX + "</context>"}, *other["messages"][1:]]}, header)  # fmt: skip
    assert not isinstance(found, str) and found.context == CTX
    assert found.prompt is not None and found.prompt["status"] == "different"
    hist = match_prompt(_request(history=2), _app())
    assert not isinstance(hist, str) and hist.prompt is not None and hist.prompt["status"] == "different"
    assert any("history" in d for d in hist.prompt["differs"])
    shot = _request()
    shot["messages"][2] = {"role": "assistant", "content": "Acme's kettle, I think."}
    loc2 = match_prompt(shot, _app())
    assert not isinstance(loc2, str) and loc2.prompt is not None and loc2.prompt["status"] == "different"
    assert loc2.prompt["differs"] == ["message 2 (assistant): the fixed turn"]


def test_a_request_without_context_where_the_prompt_has_one_is_undetermined():
    assert match_prompt(_request(context=""), _app()) == NO_CONTEXT
    header = {"prompt": PromptBuilder(app=_app()).to_dict()}
    assert locate_for_profile(_request(context="  "), header) == NO_CONTEXT


def test_a_layout_never_calibrated_is_refused():
    header = {"prompt": PromptBuilder(app=_app()).to_dict()}
    assert profile_layout(header) == "system"
    body = {"messages": [{"role": "user", "content": "<context>" + CTX + "</context>\n" + QUERY}]}
    loc = locate_for_profile(body, header)
    assert not isinstance(loc, str) and loc.layout == "user"
    with pytest.raises(LayoutMismatch, match="layout 'system'"):
        check_layout(header, loc)


def test_profiles_without_an_app_prompt_locate_as_before():
    assert app_prompt_of({"prompt": PromptBuilder().to_dict()}) is None
    body = {"messages": [{"role": "user", "content": "<context>" + CTX + "</context>\n" + QUERY}]}
    loc = locate_for_profile(body, {"prompt": PromptBuilder(chat=True).to_dict()})
    assert not isinstance(loc, str) and loc.context == CTX and loc.prompt is None


def test_a_completion_prompt_matches_too():
    app = parse_app_prompt({"prompt": "Docs: {context}\nQ: {query}\nA:"})
    loc = match_prompt({"prompt": "Docs: Paris is in France.\nQ: Where is Paris?\nA:"}, app)
    assert not isinstance(loc, str) and loc.context == "Paris is in France." and loc.layout == "prompt"
    assert loc.prompt_without == "Docs: \nQ: Where is Paris?\nA:"
    assert match_prompt({"prompt": "Docs: \nQ: Where?\nA:"}, app) == NO_CONTEXT


def test_other_instructions_around_the_same_delimiters_are_located_and_marked_different():
    rewritten = _request(system="You are a friendly museum guide. Reply warmly.\n\nDocuments:\n")
    loc = match_prompt(rewritten, _app())
    assert not isinstance(loc, str) and loc.context == CTX and loc.layout == "system"
    assert loc.prompt is not None and loc.prompt["status"] == "different"
    assert loc.prompt["differs"] == ["message 0 (system): the text outside the context's delimiters"]
    assert loc.messages_without is not None
    assert (
        loc.messages_without[0]["content"] == "You are a friendly museum guide. Reply warmly.\n\nDocuments:\n"
    )
    # the header mid-line, another header, or an empty context: not located / undetermined
    assert isinstance(match_prompt(_request(system="Be brief. Documents:\n"), _app()), str)
    assert isinstance(match_prompt(_request(system="Be brief.\nReference notes:\n"), _app()), str)
    assert match_prompt(_request(system="Be brief.\nDocuments:\n", context=" "), _app()) == NO_CONTEXT


def test_span_by_delimiters_reads_both_sides_and_refuses_weak_ones():
    tpl = "Answer from the notes.\n<docs>\n{context}\n</docs>\nBe brief."
    text = "Other words.\n<docs>\nA <docs> B\n</docs>\nC\n</docs>\nShort."
    start, end = span_by_delimiters(tpl, text) or (0, 0)
    assert text[start:end] == "A <docs> B\n</docs>\nC"  # first header, last closing line
    assert span_by_delimiters("Docs: {context}", "Other text\nDocs: X") is not None
    assert span_by_delimiters("Hi\n: {context}", "Hey\n: X") is None  # a one-character header
    assert span_by_delimiters("{context}\n\nQ: {query}", "x\n\nQ: y") is None  # the query shares it
    assert span_by_delimiters("{context}", "anything") == (0, 8)
