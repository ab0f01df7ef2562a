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
