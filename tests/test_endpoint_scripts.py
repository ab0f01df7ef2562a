"""Answers in any script over llama.cpp's llama-server: no audit fails on Cyrillic, Greek, CJK, Arabic,
emoji or code.

Byte-level BPE splits a character outside the vocabulary's merges into tokens of raw bytes; llama.cpp
rejects such a token at a grammar's token element and llama-server reports no probabilities for a
token that ends inside a character. The native path forces them one by one instead
(``mnemoscope.trace.endpoint_score.native_force``). Pure checks run anywhere; the rest need the
llama-server binary ($MNEMOSCOPE_LLAMA_SERVER, skipped without it unless MNEMOSCOPE_REQUIRE_SERVICES=1).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from mnemoscope.trace.endpoint_score import topk_bound, whole_positions

# (context, query, answer): one per script; the context names the answer, so the audit has both paths
MIXED = [
    ("Moscow (Москва) is the capital of Russia.", "What is the capital of Russia?", "Москва"),
    (
        "Moscow (Москва) is the capital of Russia.",
        "Answer in Russian: capital of Russia?",
        "Столица России — Москва.",
    ),
    ("Athens (Αθήνα) is the capital of Greece.", "What is the capital of Greece?", "Αθήνα"),
    ("Tokyo (東京) is the capital of Japan.", "What is the capital of Japan?", "東京です。"),
    ("Cairo (القاهرة) is the capital of Egypt.", "What is the capital of Egypt?", "القاهرة"),
    ("The party emoji is 🎉.", "Which emoji means party?", "🎉 🎊"),
    ("def add(a, b): return a + b", "Write the add function.", "def add(a, b):\n    return a + b  # ✓"),
]


def test_whole_positions_marks_tokens_inside_a_character():
    pieces = ["М".encode()[:1], "М".encode()[1:], "осква".encode(), " 🎉".encode()[:3], " 🎉".encode()[3:]]
    assert whole_positions(pieces) == [False, False, True, False, False]
    assert whole_positions([b"a", b" b"]) == [True, True]


def test_topk_bound_is_the_kth_probability_or_the_tail():
    top = {1: math.log(0.6), 2: math.log(0.3)}
    assert topk_bound(top) == pytest.approx(math.log(0.1))  # tail 0.1 < p_k 0.3
    top = {1: math.log(0.5), 2: math.log(0.01)}
    assert topk_bound(top) == pytest.approx(math.log(0.01))  # p_k 0.01 < tail 0.49
    with pytest.raises(ValueError):
        topk_bound({})


# -- llama-server ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def native_profile(native_server, tmp_path_factory):
    """An endpoint profile calibrated against llama-server (3 + 3 verified items, default template)."""
    from helpers import calibrate_on_verified

    return calibrate_on_verified(native_server.base_url, tmp_path_factory.mktemp("native-profile"), 3)


def _client(server):  # type: ignore[no-untyped-def]
    from mnemoscope.models.endpoint import EndpointClient, EndpointConfig

    return EndpointClient(EndpointConfig(server.base_url, concurrency=1, timeout=300, method="auto"))


def test_answers_in_every_script_are_audited(native_server, native_profile):
    """Given answers (the proxy's case) in six scripts and code: none fails, each scored on the native
    path, the answer's text kept exactly."""
    from mnemoscope.audit.auditor import Auditor
    from mnemoscope.audit.requests import AuditFailure, AuditRequest

    with _client(native_server) as c:
        aud = Auditor.from_endpoint(c, native_profile)
        reqs = [
            AuditRequest(context=ctx, query=q, answer=a, id=str(i)) for i, (ctx, q, a) in enumerate(MIXED)
        ]
        got = aud.audit(reqs)
    failed = [(i, r.message) for i, r in enumerate(got) if isinstance(r, AuditFailure)]
    assert not failed, failed
    for (_ctx, _q, a), r in zip(MIXED, got, strict=True):
        assert not isinstance(r, AuditFailure)
        assert r.answer == a
        assert r.extra["endpoint_method"] == "native-grammar-forced-topk+llama.cpp"
        assert r.extra["fallbacks"] == []
        assert isinstance(r.extra["bounded"], bool) and set(r.extra["bounded_positions"]) == {
            "with-context",
            "no-context",
        }
        assert math.isfinite(r.evidence["closed_book_logprob"])


def test_a_generated_non_latin_answer_is_audited(native_server, native_profile):
    """The model generates in Cyrillic itself: llama-server hides the tokens that end inside a
    character, so the answer's text is re-tokenized and forced on both paths."""
    from mnemoscope.audit.auditor import Auditor
    from mnemoscope.audit.requests import AuditFailure, AuditRequest

    with _client(native_server) as c:
        aud = Auditor.from_endpoint(c, native_profile)
        (r,) = aud.audit(
            [
                AuditRequest(
                    context="Москва — столица России.", query="Какая столица России? Ответь по-русски."
                )
            ]
        )
    assert not isinstance(r, AuditFailure), r.message
    assert r.n_steps >= 1 and r.answer


def test_a_server_error_of_a_path_falls_back_with_its_cause(native_server, monkeypatch):
    """Under auto, a path that fails with a server error (HTTP 500 after the retries) passes the
    record to the next sound path; the cause is recorded in the trace."""
    import mnemoscope.trace.endpoint as tep
    from mnemoscope.models.endpoint import EndpointError
    from mnemoscope.trace.chat_template import load_chat_template
    from mnemoscope.trace.endpoint import EndpointPairConfig, trace_endpoint_pair
    from mnemoscope.trace.templates import PromptBuilder

    def broken(*a, **kw):  # type: ignore[no-untyped-def]
        raise EndpointError("POST /completion HTTP 500: boom (3 attempts)", endpoint="x", status=500)

    monkeypatch.setattr(tep, "native_force", broken)
    cfg = EndpointPairConfig(
        builder=PromptBuilder(template="A", chat=True),
        template=load_chat_template("default"),
        max_new_tokens=8,
    )
    with _client(native_server) as c:
        tr, pieces = trace_endpoint_pair(
            c, "r", "Paris is in France.", "Where is Paris?", cfg, answer="Paris"
        )
    assert tr.backend["fallbacks"] == [
        {"path": "native", "status": 500, "message": "POST /completion HTTP 500: boom (3 attempts)"}
    ]
    assert tr.backend["method"].startswith("answer-positions-logit-bias-topk")
    assert "".join(pieces) == "Paris" and np.all(np.isfinite(tr.logprob_answer_without))


def test_a_token_outside_the_top_k_is_bounded(native_server):
    """With k = 1 the answer's rare tokens fall outside the top-k on the no-context path: their
    log-probs are upper bounds, listed per position, never a refusal."""
    from mnemoscope.trace.chat_template import load_chat_template
    from mnemoscope.trace.endpoint import EndpointPairConfig, trace_endpoint_pair
    from mnemoscope.trace.templates import PromptBuilder

    cfg = EndpointPairConfig(
        builder=PromptBuilder(template="A", chat=True), template=load_chat_template("default"), top_k=2
    )
    with _client(native_server) as c:
        tr, _ = trace_endpoint_pair(c, "r", "", "Say something.", cfg, answer="Столица 🎉")
    b = tr.backend["bounded_positions"]["no-context"]
    assert tr.backend["bounded"] and b
    for t in b:  # a bound is at most the k-th log-prob there
        assert tr.logprob_answer_without[t] <= tr.topk_logprobs_without[t].min() + 1e-6
    assert any("upper bound" in n for n in tr.backend["notes"])
