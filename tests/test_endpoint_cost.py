"""The cheap endpoint scoring paths (issue 25): answer positions only (llama-cpp-python and OpenAI
completions servers, ``positions``) and llama.cpp's native server (``native``).

Unit tests use a mock transport; the rest talk to the real llama.cpp server of the session
(``llama_server`` fixture: skipped without llama-cpp-python, a failure under
MNEMOSCOPE_REQUIRE_SERVICES=1) and, for ``native``, to llama.cpp's C++ llama-server when
``$MNEMOSCOPE_LLAMA_SERVER`` names a binary. Costs are measured by benchmarks/bench_endpoint_cost.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mnemoscope.models.endpoint import (
    EndpointClient,
    EndpointConfig,
    EndpointError,
    TokenAlignmentError,
)
from mnemoscope.trace.endpoint import (
    ChatTemplate,
    EndpointPairConfig,
    load_chat_template,
    trace_endpoint_pair,
    trace_endpoint_prompts,
)
from mnemoscope.trace.endpoint_score import served_scores
from mnemoscope.trace.templates import PromptBuilder

ROOT = Path(__file__).resolve().parents[1]
VERIFIED = ROOT / "benchmarks" / "results" / "verdict" / "verified.jsonl"

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
GEMMA = (
    "{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == 'assistant' "
    "else message['role'] %}<start_of_turn>{{ role }}\n{{ message['content'] | trim }}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


def _items(n_per_label: int = 1) -> list[dict]:
    items = [json.loads(x) for x in VERIFIED.read_text().splitlines() if x.strip()]
    return [it for it in items if it["label"] == 1][:n_per_label] + [it for it in items if it["label"] == 0][
        :n_per_label
    ]


# -- units ------------------------------------------------------------------------------------------


def test_end_texts_of_chat_templates():
    """Every end-of-generation text of the template ends an answer: the template's own end-of-turn
    marker first (read from how it closes an assistant turn), then the EOS token's text."""
    assert ChatTemplate(CHATML, eos_text="<|endoftext|>").end_texts == ("<|im_end|>", "<|endoftext|>")
    assert ChatTemplate(GEMMA, eos_text="<eos>", bos_text="<bos>").end_texts == ("<end_of_turn>", "<eos>")
    assert ChatTemplate(CHATML, eos_text="<|im_end|>").end_texts == ("<|im_end|>",)
    assert ChatTemplate(None, eos_text="</s>").end_texts == ("</s>",)
    assert ChatTemplate(None).end_texts == ()
    tpl = load_chat_template("default")  # SmolLM2: ChatML, EOS <|im_end|>
    assert tpl.end_texts[0] == "<|im_end|>"


def _mock_positions_server(
    honour_bias: bool = True,
    stop_as_text: bool = False,
    grammar: str = "unconstrained",
    merge_from: int | None = None,
):
    """A llama-cpp-python-like server over characters: token id = ord(char); generation answers
    'ab' (then stops); a forced position returns the forced character with fixed log-probs.

    ``grammar``: how a GBNF grammar of token ids is served: ``unconstrained`` (forced, the raw top-k
    reported, as llama-cpp-python does), ``constrained`` (forced, but the reported distribution is
    the constrained one: log-prob 0 for the forced token), ``ignored``. ``merge_from``: forced
    position requests whose prompt is at least this many characters longer than a chat prompt
    report one prompt token fewer (a prefix that re-tokenizes with a merge)."""
    import re

    import httpx

    calls: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content or b"{}")
        calls.append({"path": request.url.path, **body})
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        if request.url.path == "/extras/tokenize":
            return httpx.Response(200, json={"tokens": [ord(ch) for ch in body["input"]]})
        prompt = body["prompt"]
        top = {"a": -0.3, "b": -1.9, "c": -3.0}
        if body.get("echo"):  # the capability probe, and the echo path
            n = len(prompt) + 1
            lp = {"tokens": [*prompt, "a"], "token_logprobs": [-0.1] * n, "top_logprobs": [top] * n}
            return httpx.Response(
                200, json={"choices": [{"text": prompt + "a", "logprobs": lp}], "usage": {}}
            )
        if body.get("grammar") and grammar != "ignored":
            ids = [int(x) for x in re.findall(r"<\[(\d+)\]>", body["grammar"])][: body["max_tokens"]]
            toks = [chr(i) for i in ids]
            if grammar == "constrained":
                own, tops = [0.0] * len(toks), [{t: 0.0} for t in toks]
            else:
                own = [top.get(t, -4.0) for t in toks]
                tops = [{**top, t: top.get(t, -4.0)} for t in toks]
            lp = {"tokens": toks, "token_logprobs": own, "top_logprobs": tops}
            return httpx.Response(
                200,
                json={
                    "choices": [{"text": "".join(toks), "logprobs": lp, "finish_reason": "length"}],
                    "usage": {"completion_tokens": len(toks), "prompt_tokens": len(prompt)},
                },
            )
        if body["max_tokens"] > 1:  # the with-context generation
            toks = ["a", "b"] + (["<", "E", ">"] if stop_as_text else [])
            text = "ab"
            lp = {"tokens": toks, "token_logprobs": [-0.2] * len(toks), "top_logprobs": [top] * len(toks)}
            return httpx.Response(
                200,
                json={
                    "choices": [{"text": text, "logprobs": lp, "finish_reason": "stop"}],
                    "usage": {"completion_tokens": len(toks), "prompt_tokens": len(prompt)},
                },
            )
        bias = body.get("logit_bias") or {}
        forced = [int(t) for t, v in bias.items() if v > 0]
        n_prompt = len(prompt)
        if (
            merge_from is not None
            and forced
            and prompt.rstrip("ab") != prompt
            and len(prompt) - len(prompt.rstrip("ab")) >= merge_from
        ):
            n_prompt -= 1
        tok = chr(forced[0]) if forced and honour_bias else "a"
        lp = {
            "tokens": [tok],
            "token_logprobs": [-0.7],
            "top_logprobs": [{"a": -1.2, "b": -1.5, "c": -3.0, tok: -0.7}],
        }
        return httpx.Response(
            200,
            json={
                "choices": [{"text": tok, "logprobs": lp, "finish_reason": "length"}],
                "usage": {"completion_tokens": 1, "prompt_tokens": n_prompt},
            },
        )

    return handler, calls


def _cfg(**kw) -> EndpointPairConfig:
    return EndpointPairConfig(
        builder=PromptBuilder(template="A", chat=False), template=ChatTemplate(None), top_k=3, **kw
    )


def test_positions_path_scores_only_answer_positions():
    import httpx

    handler, calls = _mock_positions_server()
    c = EndpointClient(
        EndpointConfig("http://mock/v1", method="positions"), transport=httpx.MockTransport(handler)
    )
    assert c.capabilities().method == "answer-positions-logit-bias-topk+llama-cpp-python"
    calls.clear()
    tr, pieces = trace_endpoint_pair(c, "r1", "ctx", "q?", _cfg())
    assert pieces == ["a", "b"] and tr.answer_with == "ab" and tr.n_steps == 2
    comp = [x for x in calls if x["path"] == "/v1/completions"]
    # one generation + one forced request per answer position on the no-context path, no echo
    assert len(comp) == 1 + 2 and not any(x.get("echo") for x in comp)
    forced = [x for x in comp if x.get("logit_bias")]
    assert [list(x["logit_bias"]) for x in forced] == [[str(ord("a"))], [str(ord("b"))]]
    assert forced[1]["prompt"].endswith("a")  # the prefix grows by the answer's own pieces
    np.testing.assert_allclose(tr.logprob_answer_without, [-0.7, -0.7])
    np.testing.assert_allclose(tr.logprob_answer_with, [-0.2, -0.2], rtol=1e-6)
    assert tr.backend["method"].startswith("answer-positions") and tr.backend["kl_estimator"] == "topk"
    # the given-answer case (the proxy): both paths forced
    calls.clear()
    tr2, _ = trace_endpoint_prompts(c, "r2", "P: ctx q?\n", "P: q?\n", _cfg(), answer="ab")
    assert sum(1 for x in calls if x.get("logit_bias")) == 4 and tr2.answer_with == "ab"


def test_positions_path_refuses_a_server_ignoring_logit_bias():
    import httpx

    handler, _ = _mock_positions_server(honour_bias=False)
    c = EndpointClient(
        EndpointConfig("http://mock/v1", method="positions"), transport=httpx.MockTransport(handler)
    )
    with pytest.raises(TokenAlignmentError, match=r"forced token came back as \['a'\], not 'b'") as e:
        trace_endpoint_pair(c, "r1", "ctx", "q?", _cfg())
    assert "record r1" in str(e.value) and "http://mock/v1" in str(e.value)


def test_an_end_of_turn_written_as_text_is_never_part_of_the_answer():
    """The model writes its end-of-turn marker as ordinary tokens: the answer stops before it."""
    import httpx

    handler, _ = _mock_positions_server(stop_as_text=True)
    c = EndpointClient(EndpointConfig("http://mock/v1"), transport=httpx.MockTransport(handler))
    cfg = _cfg()
    cfg = EndpointPairConfig(cfg.builder, ChatTemplate(None, eos_text="<E>"), top_k=3)
    tr, pieces = trace_endpoint_pair(c, "r1", "ctx", "q?", cfg)
    assert tr.answer_with == "ab" and pieces == ["a", "b"] and not tr.stopped_at_eos
    assert any("end-of-turn text as ordinary tokens" in n for n in tr.backend["notes"])


def test_grammar_path_forces_the_answer_in_one_request():
    """grammar (auto on llama-cpp-python): the no-context path is ONE request forcing the answer's
    ids; the given-answer case is one request per path; the server's grammar forcing is probed once."""
    import httpx

    handler, calls = _mock_positions_server()
    c = EndpointClient(EndpointConfig("http://mock/v1"), transport=httpx.MockTransport(handler))
    assert c.capabilities().method == "completions-grammar-forced-topk+llama-cpp-python"
    tr, pieces = trace_endpoint_pair(c, "r1", "ctx", "q?", _cfg())
    assert c.probes == {"grammar": None}  # probed: forced, unconstrained top-k
    calls.clear()
    tr, pieces = trace_endpoint_pair(c, "r1", "ctx", "q?", _cfg())
    comp = [x for x in calls if x["path"] == "/v1/completions"]
    assert len(comp) == 2 and comp[1]["grammar"] == f"root ::= <[{ord('a')}]> <[{ord('b')}]>"
    assert comp[1]["max_tokens"] == 2 and comp[1]["logprobs"] == 3 and not comp[1].get("logit_bias")
    assert pieces == ["a", "b"] and tr.backend["method"] == "completions-grammar-forced-topk+llama-cpp-python"
    np.testing.assert_allclose(tr.logprob_answer_without, [-0.3, -1.9], rtol=1e-6)
    calls.clear()
    tr2, _ = trace_endpoint_prompts(c, "r2", "P: ctx q?\n", "P: q?\n", _cfg(), answer="ab")
    assert sum(1 for x in calls if x.get("grammar")) == 2 and tr2.answer_with == "ab"


@pytest.mark.parametrize("mode", ["constrained", "ignored"])
def test_unsound_grammar_forcing_falls_back_to_positions(mode):
    """A server whose grammar-forced log-probs are the constrained distribution (or that ignores the
    grammar) is caught by the probe; under auto the record is scored by positions, and says so."""
    import httpx

    handler, _ = _mock_positions_server(grammar=mode)
    c = EndpointClient(EndpointConfig("http://mock/v1"), transport=httpx.MockTransport(handler))
    tr, _ = trace_endpoint_pair(c, "r1", "ctx", "q?", _cfg())
    assert tr.backend["method"] == "answer-positions-logit-bias-topk+llama-cpp-python"
    assert c.probes["grammar"] and tr.backend["notes"][0].startswith(
        "grammar refused: grammar forcing is not sound"
    )
    c2 = EndpointClient(
        EndpointConfig("http://mock/v1", method="grammar"), transport=httpx.MockTransport(handler)
    )
    with pytest.raises(EndpointError, match="grammar forcing is not sound"):
        trace_endpoint_pair(c2, "r1", "ctx", "q?", _cfg())  # a named method has no fallback


def test_positions_refusal_falls_back_to_the_next_sound_path():
    """positions refuses a prefix that re-tokenizes with a merge; under auto the next path (echo
    here, grammar being unsound on this server) scores the record and endpoint_method names it."""
    import httpx

    handler, _ = _mock_positions_server(grammar="ignored", merge_from=1)
    named = EndpointClient(
        EndpointConfig("http://mock/v1", method="positions"), transport=httpx.MockTransport(handler)
    )
    with pytest.raises(TokenAlignmentError, match="re-tokenizes into"):
        trace_endpoint_pair(named, "r1", "ctx", "q?", _cfg())
    c = EndpointClient(EndpointConfig("http://mock/v1"), transport=httpx.MockTransport(handler))
    assert c.capabilities().fallbacks == ("grammar", "positions", "echo")
    tr, _ = trace_endpoint_pair(c, "r1", "ctx", "q?", _cfg(align_tol=10.0))
    assert tr.backend["method"] == "completions-echo-logprobs+llama-cpp-python"
    notes = tr.backend["notes"]
    assert notes[0].startswith("grammar refused") and notes[1].startswith("positions refused")
    assert "re-tokenizes into" in notes[1] and notes[1].endswith("scored by the next path (echo)")


def test_served_logprobs_spare_the_with_context_path():
    """The proxy's case: the with-context log-probs come with the served answer (chat or completions
    format); the audit forces the no-context path only. Served log-probs that do not line up (another
    prompt length) are not used, and the trace says so."""
    import httpx

    from mnemoscope.server.proxy import _ask_logprobs
    from mnemoscope.trace.endpoint_score import served_scores

    top = [{"token": "a", "logprob": -0.3}, {"token": "b", "logprob": -1.9}, {"token": "c", "logprob": -3.0}]
    chat = {
        "choices": [
            {
                "message": {"content": "ab"},
                "logprobs": {
                    "content": [
                        {"token": t, "logprob": v, "top_logprobs": top} for t, v in (("a", -0.3), ("b", -1.9))
                    ]
                },
            }
        ],
        "usage": {"prompt_tokens": len("P: ctx q?\n")},
    }
    served = served_scores(chat)
    assert served is not None and served.pieces == ["a", "b"] and served.n_prompt == 10
    legacy = {
        "choices": [
            {
                "text": "ab",
                "logprobs": {"tokens": ["a"], "token_logprobs": [-0.3], "top_logprobs": [{"a": -0.3}]},
            }
        ]
    }
    assert (
        served_scores(legacy).own == [-0.3]
        and served_scores({"choices": [{"text": "ab", "logprobs": None}]}) is None
    )
    body = {"messages": [], "mnemoscope": {"context": "x"}}
    added, raw = _ask_logprobs(body, "v1/chat/completions", b"", 20)
    assert added and json.loads(raw) == {"messages": [], "logprobs": True, "top_logprobs": 20}
    assert _ask_logprobs({"prompt": "p", "logprobs": 2}, "v1/completions", b"same", 20) == (False, b"same")

    handler, calls = _mock_positions_server()
    c = EndpointClient(EndpointConfig("http://mock/v1"), transport=httpx.MockTransport(handler))
    c.capabilities()
    check = trace_endpoint_prompts(c, "r0", "P: ctx q?\n", "P: q?\n", _cfg(), answer="ab")[0]  # also probes
    calls.clear()
    tr, _ = trace_endpoint_prompts(c, "r1", "P: ctx q?\n", "P: q?\n", _cfg(), answer="ab", served=served)
    forced = [x for x in calls if x.get("grammar")]
    assert len(forced) == 1 and forced[0]["prompt"] == "P: q?\n"  # the no-context path only
    np.testing.assert_allclose(tr.logprob_answer_with, [-0.3, -1.9], rtol=1e-6)
    np.testing.assert_allclose(tr.logprob_answer_without, check.logprob_answer_without)
    assert any("from the served response" in n for n in tr.backend["notes"])
    served.n_prompt = 99
    calls.clear()
    tr, _ = trace_endpoint_prompts(c, "r2", "P: ctx q?\n", "P: q?\n", _cfg(), answer="ab", served=served)
    assert sum(1 for x in calls if x.get("grammar")) == 2
    assert any("counted 99 prompt tokens" in n for n in tr.backend["notes"])


def test_method_is_validated():
    with pytest.raises(EndpointError, match="method must be auto or one of echo, positions, grammar, native"):
        EndpointConfig("http://h/v1", method="fast")


# -- real llama.cpp server (llama-cpp-python) -------------------------------------------------------


@pytest.fixture(scope="module")
def chat_cfg():
    return EndpointPairConfig(
        builder=PromptBuilder(template="A", chat=True),
        template=load_chat_template("default"),
        max_new_tokens=24,
    )


def _client(server, method: str = "auto") -> EndpointClient:
    return EndpointClient(EndpointConfig(server.base_url, concurrency=1, timeout=300, method=method))


def test_positions_agree_with_echo_on_the_real_server(llama_server, chat_cfg):
    """Same item, same server: the cheap paths (answer positions; the grammar-forced answer) give
    the same answer tokens and the same log-probs as echoing both prompts, within llama.cpp's
    batch-dependent numerics; the grammar path's no-context path is one request."""
    it = _items(1)[0]
    with (
        _client(llama_server, "positions") as cp,
        _client(llama_server, "echo") as ce,
        _client(llama_server, "grammar") as cg,
    ):
        tp, _ = trace_endpoint_pair(cp, it["id"], it["context"], it["query"], chat_cfg)
        te, _ = trace_endpoint_pair(ce, it["id"], it["context"], it["query"], chat_cfg)
        assert cp.n_requests < ce.n_requests + 2 * tp.n_steps + 4
        trace_endpoint_pair(cg, it["id"], it["context"], it["query"], chat_cfg)  # probes grammar forcing
        n0 = cg.n_requests
        tg, _ = trace_endpoint_pair(cg, it["id"], it["context"], it["query"], chat_cfg)
        assert cg.probes == {"grammar": None} and cg.n_requests - n0 <= 5 + 5 * tg.stopped_at_eos
    assert tg.backend["method"] == "completions-grammar-forced-topk+llama-cpp-python"
    assert tg.answer_ids.tolist() == tp.answer_ids.tolist()
    assert np.max(np.abs(tg.logprob_answer_without - tp.logprob_answer_without)) < chat_cfg.align_tol
    assert (
        np.max(np.abs(tg.topk_logprobs_without[:, 0] - tp.topk_logprobs_without[:, 0])) < chat_cfg.align_tol
    )
    assert tp.backend["method"] == "answer-positions-logit-bias-topk+llama-cpp-python"
    assert te.backend["method"] == "completions-echo-logprobs+llama-cpp-python"
    assert tp.answer_ids.tolist() == te.answer_ids.tolist() and tp.stopped_at_eos == te.stopped_at_eos
    tol = chat_cfg.align_tol
    assert np.max(np.abs(tp.logprob_answer_with - te.logprob_answer_with)) < tol
    assert np.max(np.abs(tp.logprob_answer_without - te.logprob_answer_without)) < tol
    assert np.max(np.abs(tp.kl_steps - te.kl_steps)) < 1.0
    assert np.max(np.abs(tp.topk_logprobs_with[:, 0] - te.topk_logprobs_with[:, 0])) < tol
    assert np.max(np.abs(tp.topk_logprobs_without[:, 0] - te.topk_logprobs_without[:, 0])) < tol


def test_given_answer_on_prerendered_prompts(llama_server, chat_cfg):
    """The proxy's case: the app's own rendered messages, the context removed, the app's answer."""
    it = _items(1)[0]
    tpl = chat_cfg.template
    sys_msg = {"role": "system", "content": "You answer in one short sentence."}
    with_ctx = tpl.apply_chat_template(
        [sys_msg, {"role": "user", "content": f"{it['context']}\n\n{it['query']}"}]
    )
    without = tpl.apply_chat_template([sys_msg, {"role": "user", "content": it["query"]}])
    with _client(llama_server) as c:
        gen, _ = trace_endpoint_prompts(c, "gen", with_ctx, without, chat_cfg)
        given, _ = trace_endpoint_prompts(c, "given", with_ctx, without, chat_cfg, answer=gen.answer_with)
    assert "<|im_end|>" not in gen.answer_with
    n = len(given.answer_ids)
    assert given.answer_ids.tolist() == gen.answer_ids.tolist()[:n]
    assert np.max(np.abs(given.logprob_answer_without - gen.logprob_answer_without[:n])) < chat_cfg.align_tol
    assert given.template == {"prerendered": True}


def test_plain_prompts_refusal_names_the_chat_template_flag(llama_server):
    """Echo on a prompt without the model's BOS is shifted by llama-cpp-python: refused, and the
    message says how to fix it (`--chat-template default`)."""
    cfg = EndpointPairConfig(builder=PromptBuilder(template="A", chat=False), template=ChatTemplate(None))
    it = _items(1)[0]
    with (
        _client(llama_server, "echo") as c,
        pytest.raises(TokenAlignmentError, match="--chat-template default"),
    ):
        trace_endpoint_pair(c, it["id"], it["context"], it["query"], cfg)


# -- llama.cpp's C++ llama-server (native path; the native_server fixture is in conftest.py) ---------


def test_native_path_on_llama_server(native_server, chat_cfg):
    """Ids in, ids out: the generation's top-k carry token ids, the no-context path is one
    grammar-forced request, and a given answer is forced the same way on both paths."""
    it = _items(1)[0]
    with _client(native_server) as c:
        caps = c.require_teacher_forcing()
        assert caps.server == "llama.cpp" and caps.method == "native-grammar-forced-topk+llama.cpp"
        n0 = c.n_requests
        tr, pieces = trace_endpoint_pair(c, it["id"], it["context"], it["query"], chat_cfg)
        n_gen = c.n_requests - n0
        n_given = c.n_requests
        given, _ = trace_endpoint_pair(
            c, it["id"], it["context"], it["query"], chat_cfg, answer=tr.answer_with
        )
        n_given = c.n_requests - n_given
        # the proxy's case: the upstream served the answer with its log-probs (ids included); the
        # audit forces the no-context path only
        ch = c.completion(
            tr.prompt_with, max_tokens=24, logprobs=20, extra={"stop": list(chat_cfg.template.end_texts)}
        )
        sv = served_scores({"choices": [ch], "usage": ch["usage"]}, by_id=True)
        n1 = c.n_requests
        via, _ = trace_endpoint_prompts(
            c, "s", tr.prompt_with, tr.prompt_without, chat_cfg, answer=str(ch["text"]), served=sv
        )
        assert c.n_requests - n1 == n_given - 1 and any(
            "from the served response" in n for n in via.backend["notes"]
        )
        m = min(via.n_steps, given.n_steps)
        assert (
            np.max(np.abs(via.logprob_answer_without[:m] - given.logprob_answer_without[:m]))
            < chat_cfg.align_tol
        )
    assert n_gen <= 6  # 2 tokenize + end-token tokenize + generation + 1 forced request
    assert "<|im_end|>" not in tr.answer_with and tr.n_steps >= 1
    assert np.all(tr.topk_ids_with >= 0) and np.all(tr.topk_ids_without >= 0)  # real ids, no spellings
    assert tr.topk_ids_with[0, 0] == tr.answer_ids[0]  # greedy: the answer's token is the top-1
    if tr.stopped_at_eos:
        assert pieces[-1] == ""
        n = given.n_steps
        assert given.answer_ids.tolist() == tr.answer_ids.tolist()[:n]
        assert (
            np.max(np.abs(given.logprob_answer_without - tr.logprob_answer_without[:n])) < chat_cfg.align_tol
        )


def test_native_and_positions_paths_agree(native_server, llama_server, chat_cfg):
    """The same GGUF behind the two servers: same greedy answer, log-probs within llama.cpp's
    batch-dependent numerics."""
    it = _items(1)[0]
    with _client(native_server) as cn, _client(llama_server) as cp:
        tn, _ = trace_endpoint_pair(cn, it["id"], it["context"], it["query"], chat_cfg)
        tp, _ = trace_endpoint_pair(cp, it["id"], it["context"], it["query"], chat_cfg)
    n = min(tn.n_steps, tp.n_steps)
    assert tn.answer_ids.tolist()[: n - 1] == tp.answer_ids.tolist()[: n - 1]
    assert np.max(np.abs(tn.logprob_answer_without[: n - 1] - tp.logprob_answer_without[: n - 1])) < 0.5


def test_fingerprint_on_llama_server(native_server):
    """llama-server answers /v1/completions log-probs in the chat-style ``content`` format: the
    fingerprint (what ``calibrate --endpoint`` records and every endpoint audit checks) reads it, and
    the same server fingerprints the same twice."""
    from mnemoscope.audit.backends import compare_fingerprints

    with _client(native_server) as c:
        a, b = c.fingerprint(), c.fingerprint()
        c.require_top_k(20)
    assert all(len(p) == 10 for p in a.probes.values())
    assert compare_fingerprints(a, b) is None


# -- the closed-book answer read off the no-context pass (native) -----------------------------------


class _Continuation:
    """A stand-in for llama-server's ``POST /completion``: records each call, answers ``content``."""

    def __init__(self, *contents: tuple[str, str]):
        self.contents = list(contents)
        self.calls: list[tuple[list[int], int, dict | None]] = []

    def native_completion(self, prompt, *, n_predict, n_probs=0, grammar=None, extra=None):  # type: ignore[no-untyped-def]
        self.calls.append((list(prompt), n_predict, extra))
        content, stop_type = self.contents.pop(0)
        return {"content": content, "stop_type": stop_type}


def _tops(*top1: int, tie: int | None = None) -> list[dict[int, float]]:
    return [{t: -0.1, 99: -0.1 if i == tie else -2.5} for i, t in enumerate(top1)]


def test_closed_book_read_off_the_no_context_pass():
    """Greedy decoding without the context writes the answer's token while the no-context top-1 is
    that token: those tokens are read, the rest is generated on from the first difference (the
    no-context prompt + the answer's first tokens), with the profile's stops."""
    from mnemoscope.trace.endpoint import _native_closed_book

    ids_wo, ans, pieces = [1, 2], [10, 11, 12, 13], ["A", " b", " c", ""]
    clean = [True] * 4
    # all four agree and the answer ended on its end token: the closed-book answer is the answer
    fake = _Continuation()
    assert _native_closed_book(fake, ids_wo, clean, 32, ans, _tops(10, 11, 12, 13), pieces, True, []) == (
        "A b c",
        4,
        False,
    )
    assert fake.calls == []
    # the no-context top-1 differs at position 2: two tokens read, T - 2 generated on after them
    fake = _Continuation((" d.", "eos"))
    got = _native_closed_book(fake, ids_wo, clean, 32, ans, _tops(10, 11, 50, 13), pieces, True, ["\n\n"])
    assert got == ("A b d.", 2, True)
    assert fake.calls == [([1, 2, 10, 11], 30, {"stop": ["\n\n"]})]
    # a tie for the top-1 is left to the server; so is a token that ends inside a character
    fake = _Continuation(("x", "eos"), ("y", "eos"))
    assert (
        _native_closed_book(fake, ids_wo, clean, 32, ans, _tops(10, 11, 12, 13, tie=1), pieces, True, [])[1]
        == 1
    )
    assert (
        _native_closed_book(
            fake, ids_wo, [True, False, True, True], 32, ans, _tops(10, 11, 50), pieces, True, []
        )[1]
        == 1
    )
    # T reached: nothing generated; an answer cut before its end (no end token) is generated on
    fake = _Continuation(("!", "limit"))
    assert _native_closed_book(fake, ids_wo, clean, 2, ans, _tops(10, 11, 12, 13), pieces, True, []) == (
        "A b",
        2,
        False,
    )
    assert _native_closed_book(
        fake, ids_wo, clean[:3], 32, ans[:3], _tops(10, 11, 12), pieces[:3], False, []
    )[0] == ("A b c!")
    assert fake.calls[-1][:2] == ([1, 2, 10, 11, 12], 29)
    # a server stop before the first non-blank character (an app's cut ignores it): generated again
    fake = _Continuation((" ", "word"), ("\n\nParis", "eos"))
    got = _native_closed_book(fake, ids_wo, clean, 32, ans, _tops(50), pieces, True, ["\n\n"])
    assert got == ("\n\nParis", 0, True) and fake.calls[1][2] is None


def test_closed_book_answers_read_off_the_no_context_pass_are_the_generated_ones(native_server, chat_cfg):
    """On llama-server the closed-book answer made with the trace (read off the no-context pass, the
    rest generated on) is the one a whole greedy generation on the no-context prompt writes, and
    one that agrees with the answer costs no request."""
    items = _items(2)
    read_whole = 0
    with _client(native_server) as c:
        for it in items:
            tr, _ = trace_endpoint_pair(
                c, it["id"], it["context"], it["query"], chat_cfg, closed_book_tokens=chat_cfg.max_new_tokens
            )
            whole = c.completion(tr.prompt_without, max_tokens=chat_cfg.max_new_tokens)
            assert tr.answer_without == whole["text"], it["id"]
            info = tr.backend["closed_book"]
            read_whole += not info["generated"]
            assert 0 <= info["tokens_read"] <= tr.n_steps
    assert read_whole >= 1  # rel-mem-001: the model answers it from memory, word for word
