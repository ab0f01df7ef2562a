"""Stop sequences over an endpoint: the served answer is cut on the server's own tokens."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="module")
def client(llama_server):  # type: ignore[no-untyped-def]
    from mnemoscope.models.endpoint import EndpointClient, EndpointConfig

    c = EndpointClient(EndpointConfig(llama_server.base_url, concurrency=1, timeout=300))
    yield c
    c.close()


def test_endpoint_answer_is_cut_at_the_stop_on_a_token_boundary(client) -> None:  # type: ignore[no-untyped-def]
    from mnemoscope.trace.endpoint import EndpointPairConfig, load_chat_template, trace_endpoint_pair
    from mnemoscope.trace.templates import PromptBuilder

    cfg = EndpointPairConfig(
        builder=PromptBuilder(template="A", chat=True), template=load_chat_template("default")
    )
    ctx = "Quenmar is a small town in the north. The river Zorblat runs through Quenmar."
    q = "Which river runs through Quenmar?"
    full, _ = trace_endpoint_pair(client, "a", ctx, q, cfg)
    assert "Zorblat" in full.answer_with and full.answer_cut is None
    stop = "Zorblat"  # cut just before the river's name: the answer keeps the words before it
    cut_cfg = replace(cfg, builder=replace(cfg.builder, stop=(stop,)))
    t, pieces = trace_endpoint_pair(client, "a", ctx, q, cut_cfg)
    c = t.answer_cut
    assert c is not None and c["stop"] == stop and c["token"] == t.n_steps == len(pieces)
    assert stop not in t.answer_with and "".join(pieces) == t.answer_with
    assert full.answer_with.startswith(t.answer_with) and not t.stopped_at_eos
    assert list(t.answer_ids) == list(full.answer_ids[: t.n_steps])
    assert t.kl_steps.shape == (t.n_steps,)


# -- the stop sequences go to the server on every path (issue 36) ------------------------------------

CTX = "Quenmar is a small town in the north. The river Zorblat runs through Quenmar."
QUERY = "Which river runs through Quenmar?"
STOP = " runs"  # both the answer and the closed-book answer go on past it without a stop


def _recording(server, method: str):  # type: ignore[no-untyped-def]
    """A client of ``server`` that keeps every request body with the server's answer."""
    from mnemoscope.models.endpoint import EndpointClient, EndpointConfig

    c = EndpointClient(EndpointConfig(server.base_url, concurrency=1, timeout=300, method=method))
    seen: list[tuple[str, dict, object]] = []
    request = c.request

    def rec(m, path, body=None, *, root=False):  # type: ignore[no-untyped-def]
        out = request(m, path, body, root=root)
        seen.append((path, dict(body or {}), out))
        return out

    c.request = rec  # type: ignore[method-assign]
    return c, seen


def _generations(seen, prompt_ids=None):  # type: ignore[no-untyped-def]
    """The generating requests (not forced, more than one token): ``(body, tokens generated)``."""
    out = []
    for path, body, ans in seen:
        if body.get("grammar") or body.get("logit_bias") or body.get("echo"):
            continue
        if path == "/completions" and body.get("max_tokens", 0) > 1:
            out.append((body, (ans.get("usage") or {}).get("completion_tokens")))
        elif path == "/completion" and body.get("n_predict", 0) > 1:
            out.append((body, ans.get("tokens_predicted")))
    return out


def _check_stopped(server, method: str) -> None:  # type: ignore[no-untyped-def]
    """With a stop sequence the model would go past, every generating request carries it, the
    server stops there (fewer tokens generated than without it), and the audited answer and its
    cut are the ones the client-side cut gives on the whole generation (as in process); the
    closed-book answer is cut at the stop too."""
    from mnemoscope.trace.endpoint import EndpointPairConfig, load_chat_template, trace_endpoint_pair
    from mnemoscope.trace.templates import PromptBuilder

    T = 32
    cfg = EndpointPairConfig(
        builder=PromptBuilder(template="A", chat=True),
        template=load_chat_template("default"),
        max_new_tokens=T,
    )
    stop_cfg = replace(cfg, builder=replace(cfg.builder, stop=(STOP,)))
    c, seen = _recording(server, method)
    with c:
        full, _ = trace_endpoint_pair(c, "a", CTX, QUERY, cfg, closed_book_tokens=T)
        free = _generations(seen)
        seen.clear()
        t, pieces = trace_endpoint_pair(c, "a", CTX, QUERY, stop_cfg, closed_book_tokens=T)
        stopped = _generations(seen)
    assert STOP in full.answer_with and full.answer_cut is None and full.answer_without
    assert STOP in full.answer_without, full.answer_without
    # every generation of the stopped audit carried the stop and ended sooner than without it
    assert stopped and all(STOP in (b.get("stop") or []) for b, _ in stopped), stopped
    assert all(STOP not in (b.get("stop") or []) for b, _ in free)
    assert stopped[0][1] < free[0][1], (stopped[0][1], free[0][1])
    # the audited answer: the client-side cut of the whole generation, at a token boundary
    at = full.answer_with.index(STOP)
    assert t.answer_cut is not None and t.answer_cut["stop"] == STOP and t.answer_cut["at"] == at
    assert t.answer_cut["token"] == t.n_steps == len(pieces) and not t.stopped_at_eos
    assert t.answer_ids.tolist() == full.answer_ids.tolist()[: t.n_steps]
    assert "".join(pieces) == t.answer_with and full.answer_with[:at].startswith(t.answer_with)
    # the closed-book answer ends where the stop begins
    assert t.answer_without == full.answer_without[: full.answer_without.index(STOP)]


@pytest.mark.parametrize("method", ["grammar", "positions", "echo"])
def test_stop_sequences_are_sent_by_every_llama_cpp_python_path(llama_server, method) -> None:  # type: ignore[no-untyped-def]
    _check_stopped(llama_server, method)


def test_stop_sequences_are_sent_on_llama_server(native_server) -> None:  # type: ignore[no-untyped-def]
    _check_stopped(native_server, "native")
