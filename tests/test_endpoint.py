"""The endpoint backend: black-box RePCS over an OpenAI-compatible server.

Pure parsing/alignment/retry tests run anywhere. Everything else talks to a real llama.cpp
server (``python -m llama_cpp.server`` serving the embedded default model's GGUF on a loopback
port, the session fixture ``llama_server``): skipped without llama-cpp-python, a failure under
``MNEMOSCOPE_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

import json
import math
import os
import socket
from pathlib import Path

import numpy as np
import pytest

from mnemoscope.errors import InputError
from mnemoscope.models.endpoint import (
    EndpointCapabilityError,
    EndpointClient,
    EndpointConfig,
    EndpointError,
    EndpointFingerprint,
    TokenAlignmentError,
    compare_fingerprints,
)
from mnemoscope.trace.endpoint import (
    ChatTemplate,
    EndpointPairConfig,
    check_same_distribution,
    load_chat_template,
    parse_logprobs,
    top_k_entries,
    trace_endpoint_pair,
)
from mnemoscope.trace.templates import PromptBuilder

ROOT = Path(__file__).resolve().parents[1]
VERIFIED = ROOT / "benchmarks" / "results" / "verdict" / "verified.jsonl"

# -- pure units -------------------------------------------------------------------------------------


def test_parse_logprobs_formats_and_missing():
    ch = {
        "text": " Paris",
        "logprobs": {
            "tokens": [" Paris"],
            "token_logprobs": [-0.1],
            "top_logprobs": [{" Paris": -0.1, " Lyon": -3.0}],
        },
    }
    p = parse_logprobs(ch)
    assert p.tokens == [" Paris"] and p.top_logprobs[0] == {" Paris": -0.1, " Lyon": -3.0}
    # the list-of-objects shape some servers use
    ch["logprobs"]["top_logprobs"] = [[{"token": " Paris", "logprob": -0.1}]]
    assert parse_logprobs(ch).top_logprobs[0] == {" Paris": -0.1}
    with pytest.raises(EndpointCapabilityError, match="ignores `logprobs`"):
        parse_logprobs({"text": "x", "logprobs": None}, endpoint="http://h/v1")


def test_top_k_entries_sorts_and_checks():
    top = {"a": -2.0, "b": -0.5, "c": -1.0}
    assert top_k_entries(top, 2, where="s") == [("b", -0.5), ("c", -1.0)]
    assert len(top_k_entries(top, 5, where="s")) == 3  # spellings may collide: fewer is allowed
    with pytest.raises(EndpointCapabilityError, match="fewer than 4"):
        top_k_entries(top, 5, where="s", min_k=4)
    with pytest.raises(EndpointCapabilityError, match="no top-k"):
        top_k_entries(None, 5, where="step 3")
    with pytest.raises(EndpointError, match="invalid log-prob"):
        top_k_entries({"a": float("nan")}, 1, where="s")


def test_same_distribution_check_tells_a_shift():
    a = {"Paris": -0.8, "The": -1.4, "S": -3.5, "L": -4.2}
    b = {"Paris": -0.78, "The": -1.41, "S": -3.47, "L": -4.24}
    shifted = {" is": -0.1, " was": -2.5, ",": -3.0}
    assert check_same_distribution(a, b, tol=0.5)[0]
    assert not check_same_distribution(a, shifted, tol=0.5)[0]


def test_fingerprint_comparison():
    a = EndpointFingerprint("m", {"p": {"x": -0.1, "y": -2.5, "z": -3.0, "w": -4.0}})
    b = EndpointFingerprint("alias", {"p": {"x": -0.12, "y": -2.45, "z": -3.1, "w": -4.05}})
    c = EndpointFingerprint("m", {"p": {"q": -0.1, "y": -2.0, "z": -3.0}})
    assert compare_fingerprints(a, b) is None  # ids are not compared, numbers are
    assert "top token" in str(compare_fingerprints(a, c))
    assert a.digest == EndpointFingerprint.from_dict(a.to_dict()).digest


def test_config_validation_and_key_never_shown(monkeypatch):
    with pytest.raises(EndpointError, match="end in /v1"):
        EndpointConfig("http://127.0.0.1:8080")
    with pytest.raises(EndpointError, match="MNEMO_TEST_KEY is not set"):
        EndpointClient(EndpointConfig("http://127.0.0.1:9/v1", api_key_env="MNEMO_TEST_KEY"))
    monkeypatch.setenv("MNEMO_TEST_KEY", "sk-secret-123")
    cfg = EndpointConfig("http://127.0.0.1:9/v1", api_key_env="MNEMO_TEST_KEY")
    assert "sk-secret" not in json.dumps(cfg.to_dict())


def test_retries_then_clear_errors(monkeypatch):
    """A mock transport (unit level only): 503 twice then 200 is retried; a 401 echoing the key is
    reported without the key; a server that ignores logprobs is named as such."""
    import httpx

    monkeypatch.setenv("MNEMO_TEST_KEY", "sk-secret-123")
    calls = {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if request.url.path == "/v1/models":
            if calls["n"] < 3:
                return httpx.Response(503, text="busy")
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        if request.url.path == "/v1/completions":
            return httpx.Response(200, json={"choices": [{"text": "x", "logprobs": None}]})
        return httpx.Response(401, text=f"bad key: {request.headers['authorization']}")

    cfg = EndpointConfig("http://mock/v1", api_key_env="MNEMO_TEST_KEY", retries=3, backoff=0.0)
    c = EndpointClient(cfg, transport=httpx.MockTransport(handler))
    assert c.models() == ["m"] and calls["n"] == 3
    with pytest.raises(EndpointError) as e:
        c.request("GET", "/other")
    assert "401" in str(e.value) and "sk-secret" not in str(e.value) and "[redacted]" in str(e.value)
    caps = c.capabilities()
    assert not caps.echo_logprobs and caps.tokenize is None
    with pytest.raises(EndpointCapabilityError, match="cannot teacher-force") as e2:
        c.require_teacher_forcing()
    assert "Chat-only" in str(e2.value) and "http://mock/v1" in str(e2.value)


def test_unreachable_endpoint_is_named():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    c = EndpointClient(EndpointConfig(f"http://127.0.0.1:{port}/v1", retries=1, backoff=0.0, timeout=2))
    with pytest.raises(EndpointError) as e:
        c.models()
    assert f"127.0.0.1:{port}" in str(e.value) and "unreachable" in str(e.value)


@pytest.mark.real_model
def test_client_side_chat_template_matches_transformers(real_lm):
    tpl = load_chat_template("default")
    assert tpl.eos_text == "<|im_end|>"
    b = PromptBuilder(template="A", chat=True)
    for ctx, q in [("Quenmar lies on the Zorblat.", "Which river?"), ("", "What is 2+2?")]:
        assert b.pair(ctx, q, tpl) == b.pair(ctx, q, real_lm.tokenizer)


def test_proxy_sse_answer():
    # where the proxy finds the context is tested with the layouts in tests/test_proxy.py
    from mnemoscope.server.proxy_stream import sse_answer

    raw = (
        b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n'
        b'data: {"choices":[{"delta":{"content":"Par"}}]}\n\n'
        b'data: {"choices":[{"delta":{"content":"is."}}]}\n\ndata: [DONE]\n\n'
    )
    assert sse_answer(raw) == "Paris."


# -- real llama.cpp server --------------------------------------------------------------------------


def _items(n_per_label: int) -> list[dict]:
    items = [json.loads(x) for x in VERIFIED.read_text().splitlines() if x.strip()]
    out = []
    for lab in (0, 1):
        out += [it for it in items if it["label"] == lab][:n_per_label]
    return out


@pytest.fixture(scope="module")
def client(llama_server):
    c = EndpointClient(EndpointConfig(llama_server.base_url, concurrency=1, timeout=300))
    yield c
    c.close()


@pytest.fixture(scope="module")
def chat_config():
    return EndpointPairConfig(
        builder=PromptBuilder(template="A", chat=True), template=load_chat_template("default")
    )


def test_capabilities_of_llama_cpp_python(client):
    caps = client.require_teacher_forcing()
    assert caps.server == "llama-cpp-python" and caps.tokenize == "llama-cpp-python"
    # the path's name (issue 25 picks the cheapest sound one) always says the server it relies on
    assert caps.echo_logprobs and caps.method.endswith("+llama-cpp-python")
    assert client.model == "smollm2"
    fp = client.fingerprint()
    assert compare_fingerprints(fp, client.fingerprint()) is None


@pytest.mark.real_model
def test_endpoint_trace_matches_in_process_model(client, chat_config, real_lm):
    """Same GGUF, same prompt: the server's token ids equal transformers', and the teacher-forced
    log-probs of the same answer tokens agree within the Q4_1-vs-fp32 difference."""
    from mnemoscope.trace import PairConfig, PairItem, Tracer, prepare_pair
    from mnemoscope.trace.lockstep import trace_lockstep

    ctx = "Quenmar is a small town in the north. The river Zorblat runs through Quenmar."
    q = "Which river runs through Quenmar?"
    t, pieces = trace_endpoint_pair(client, "q1", ctx, q, chat_config)
    assert t.backend["kind"] == "endpoint" and t.h_with is None and np.isnan(t.entropy_with).all()
    assert "Zorblat" in t.answer_with and "".join(pieces) == t.answer_with
    assert t.stopped_at_eos and t.answer_ids[-1] == 2  # <|im_end|> scored as a step, as in-process
    assert t.topk_ids_with.shape == (t.n_steps, 20) and np.isfinite(t.topk_logprobs_without).all()
    assert t.kl_steps.sum() > 1.0  # the context changes the answer's distribution
    tracer = Tracer(real_lm, batch_size=1)
    pc = PairConfig(builder=chat_config.builder, max_new_tokens=32, answer_without=False, hidden=False)
    prep = prepare_pair(tracer, PairItem("q1", ctx, q), pc)
    assert client.tokenize(t.prompt_with) == prep.ids_with
    (ref,) = trace_lockstep(tracer, [prep], pc, forced_answers=[t.answer_ids.tolist()])
    diff = np.abs(ref.logprob_answer_without - t.logprob_answer_without)
    assert float(diff.mean()) < 0.3, diff
    assert np.corrcoef(ref.kl_steps, t.kl_steps)[0, 1] > 0.8


def test_empty_context_and_forced_answer(client, chat_config):
    t, _ = trace_endpoint_pair(client, "e", "", "What is the capital of France?", chat_config)
    assert t.identical_prompts and t.kl_sum == 0.0
    f, pieces = trace_endpoint_pair(
        client,
        "f",
        "Paris is the capital of France.",
        "What is the capital of France?",
        chat_config,
        answer="Paris.",
    )
    assert "".join(pieces) == "Paris." and not f.stopped_at_eos and f.n_steps == len(f.answer_ids)


def test_plain_prompts_are_refused_not_misaligned(llama_server):
    """llama-cpp-python shifts echoed log-probs by one position when the prompt does not begin with
    the BOS token (a plain prompt on SmolLM2): echo must refuse, not mis-score. The grammar path
    (auto's first) forces the answer's ids after the prompt and reads log-probs from the generation
    code: it scores the record, aligned with a plain one-token generation there."""
    cfg = EndpointPairConfig(builder=PromptBuilder(template="A", chat=False), template=ChatTemplate(None))
    ctx, q = "Paris is the capital of France.", "What is the capital of France?"
    with (
        EndpointClient(EndpointConfig(llama_server.base_url, method="echo", timeout=300)) as c,
        pytest.raises(TokenAlignmentError, match=r"shifted|cannot be aligned|spell") as e,
    ):
        trace_endpoint_pair(c, "p", ctx, q, cfg, max_new_tokens=8)
    assert c.endpoint in str(e.value)
    with EndpointClient(EndpointConfig(llama_server.base_url, timeout=300)) as c:
        t, _ = trace_endpoint_pair(c, "p", ctx, q, cfg, max_new_tokens=8)
        ref = c.completion(t.prompt_without, max_tokens=1, logprobs=20)["logprobs"]["top_logprobs"][0]
    assert t.backend["method"] == "completions-grammar-forced-topk+llama-cpp-python"
    assert abs(max(ref.values()) - float(t.topk_logprobs_without[0, 0])) < cfg.align_tol


def test_timeout_is_a_clear_error(llama_server):
    c = EndpointClient(EndpointConfig(llama_server.base_url, timeout=0.001, retries=1, backoff=0.0))
    with pytest.raises(EndpointError, match="timed out") as e:
        c.completion("Once upon a time", max_tokens=64)
    assert llama_server.base_url in str(e.value)


def test_endpoint_profile_has_black_box_verdict(endpoint_profile):
    h = endpoint_profile.header
    assert h["backend"] == "endpoint" and h["repcs"]["params"]["estimator"] == "topk"
    assert h["model"]["fingerprint"].startswith("endpoint:")
    v = endpoint_profile.verdict
    assert v is not None and set(v.selected_) <= {"repcs_z", "closed_book_logprob", "context_token_fraction"}
    # an in-process loader refuses it, naming the fix
    from mnemoscope.audit.profile import ProfileError, load_profile

    with pytest.raises(ProfileError, match="--endpoint"):
        load_profile(endpoint_profile.path)


def test_cli_audit_over_endpoint(llama_server, endpoint_profile, capsys):
    from mnemoscope.cli.main import main

    rc = main(
        [
            "audit",
            "--endpoint",
            llama_server.base_url,
            "--profile",
            str(endpoint_profile.path),
            "--context",
            "Quenmar is a small town in the north. The river Zorblat runs through Quenmar.",
            "--query",
            "Which river runs through Quenmar?",
            "--json",
        ]
    )
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert d["backend"] == "endpoint" and d["endpoint_method"].endswith("+llama-cpp-python")
    assert d["crm"] is None and any("hidden-state" in n for n in d["notes"])
    assert d["source"] in ("context", "memory", "mixed", "unsupported", "undetermined")
    assert d["p_memory"] is not None and 0.0 <= d["p_memory"] <= 1.0
    assert math.isfinite(d["evidence"]["repcs_z"]) and "Zorblat" in d["answer"]


def test_profile_refuses_another_model(client, endpoint_profile):
    import dataclasses

    from mnemoscope.audit.auditor import Auditor
    from mnemoscope.audit.profile import EndpointSettings, ProfileError

    settings = endpoint_profile.endpoint
    other = EndpointFingerprint("other", {p: {"zz": -0.01} for p in settings.fingerprint.probes})
    fake = dataclasses.replace(endpoint_profile, endpoint=EndpointSettings(settings.pair_config, other))
    with pytest.raises(ProfileError, match="differs"):
        Auditor.from_endpoint(client, fake)


def test_batch_keeps_going_and_lists_failures(client, endpoint_profile, tmp_path):
    from mnemoscope.audit.auditor import Auditor, run_audit_file

    aud = Auditor.from_endpoint(client, endpoint_profile, check_identity=False)
    inp = tmp_path / "in.jsonl"
    huge = "Quenmar lies on the Zorblat. " * 700  # over the server's 4096-token window
    rows = [
        {"id": "ok", "context": "Paris is the capital of France.", "query": "What is the capital of France?"},
        {"id": "too-long", "context": huge, "query": "Which river?"},
        {"id": "bad", "context": "x", "query": ""},
    ]
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = run_audit_file(aud, inp, tmp_path / "out", progress=False)
    assert s["audited"] == 1 and s["errors"] == 2
    errs = {e["id"]: e for e in map(json.loads, (tmp_path / "out" / "errors.jsonl").read_text().splitlines())}
    assert client.endpoint in errs["too-long"]["message"]
    res = json.loads((tmp_path / "out" / "results.jsonl").read_text().splitlines()[0])
    assert res["backend"] == "endpoint"


def test_cli_repcs_eval_over_endpoint(llama_server, tmp_path, capsys):
    from mnemoscope.cli.main import main

    inp = tmp_path / "pairs.jsonl"
    inp.write_text(
        "".join(
            json.dumps({"id": it["id"], "context": it["context"], "query": it["query"], "label": it["label"]})
            + "\n"
            for it in _items(3)
        )
    )
    out = tmp_path / "eval"
    rc = main(
        [
            "-q",
            "repcs",
            "eval",
            "--endpoint",
            llama_server.base_url,
            "--endpoint-model",
            "smollm2",
            "--chat-template",
            "default",
            "--input",
            str(inp),
            "--out",
            str(out),
            "--n-resamples",
            "50",
        ]
    )
    assert rc == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["backend"] == "endpoint" and rep["endpoint_method"].endswith("+llama-cpp-python")
    assert rep["params"]["estimator"] == "topk" and rep["n"] == 6
    row = json.loads((out / "scores.jsonl").read_text().splitlines()[0])
    assert row["backend"] == "endpoint"


def test_no_api_key_in_stored_profile(endpoint_profile):
    text = (endpoint_profile.path / "profile.json").read_text()
    assert "Authorization" not in text and "Bearer" not in text
    assert os.environ.get("OPENAI_API_KEY", "<unset>") not in text or not os.environ.get("OPENAI_API_KEY")


def test_calibrate_needs_valid_signals():
    from mnemoscope.audit.calibrate import calibrate
    from mnemoscope.audit.profile import CalibrationConfig
    from mnemoscope.audit.tracing import EndpointTracer
    from mnemoscope.data.records import Record

    recs = [Record(id=f"r{i}", context="c", query="q", label=i % 2) for i in range(4)]
    with pytest.raises(InputError, match="hidden states"):  # before any server call
        calibrate(
            EndpointTracer(None),
            recs,
            "unused",
            CalibrationConfig(verdict_candidates=("repcs_z", "crm_probability")),
        )


def test_audit_service_with_a_served_model(client, endpoint_profile, tmp_path):
    """`mnemoscope serve --endpoint`: the audit server's engine is the endpoint auditor."""
    from fastapi.testclient import TestClient

    from mnemoscope.audit.auditor import Auditor
    from mnemoscope.server.app import create_app
    from mnemoscope.server.config import load_settings
    from mnemoscope.server.storage import open_store

    settings = load_settings(None, {"max_wait_ms": 5}, env={"MNEMOSCOPE_API_KEYS": "k"})
    eng = Auditor.from_endpoint(client, endpoint_profile, check_identity=False)
    with TestClient(create_app(settings, engine=eng, store=open_store(tmp_path / "a.db"))) as c:
        r = c.post(
            "/v1/audit",
            json={"context": "Paris is the capital of France.", "query": "What is the capital of France?"},
            headers={"Authorization": "Bearer k"},
        )
        assert r.status_code == 200, r.text
        a = r.json()
        assert a["backend"] == "endpoint" and a["endpoint_method"] and a["crm"] is None
        # what the endpoint trace adds reaches the API: the paths that failed first, the bounded positions
        assert a["fallbacks"] == [] and isinstance(a["bounded"], bool)
        assert set(a["bounded_positions"]) == {"with-context", "no-context"}
        s = c.get("/v1/stats", headers={"Authorization": "Bearer k"})
        assert s.status_code == 200 and s.json()["profile"]["layers"] == []


def test_cli_repcs_calibrate_then_score_over_endpoint(llama_server, endpoint_profile, tmp_path, capsys):
    from mnemoscope.cli.main import main

    rows = [
        {"id": it["id"], "context": it["context"], "query": it["query"], "label": it["label"]}
        for it in _items(2)
    ]
    inp = tmp_path / "pairs.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cal = tmp_path / "cal.json"
    common = ["--endpoint", llama_server.base_url]
    assert (
        main(
            [
                "-q",
                "repcs",
                "calibrate",
                *common,
                "--chat-template",
                "default",
                "--input",
                str(inp),
                "--out",
                str(cal),
            ]
        )
        == 0
    )
    rec = json.loads(cal.read_text())
    assert (
        rec["backend"] == "endpoint"
        and rec["model"]["spec"] == "endpoint"
        and rec["params"]["estimator"] == "topk"
    )
    out = tmp_path / "scores.jsonl"
    assert (
        main(
            [
                "-q",
                "repcs",
                "score",
                *common,
                "--calibration",
                str(cal),
                "--input",
                str(inp),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    scored = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(scored) == 4 and all(s["backend"] == "endpoint" and s["score"] == -s["kl"] for s in scored)
    # an endpoint profile folder is a calibration too; an in-process calibration is refused
    out2 = tmp_path / "scores2.jsonl"
    args = ["-q", "repcs", "score", *common, "--calibration", str(endpoint_profile.path), "--input", str(inp)]
    assert main([*args, "--out", str(out2)]) == 0
    inproc = tmp_path / "inproc.json"
    inproc.write_text(
        json.dumps({**rec, "model": {"name": "SmolLM2", "spec": "default", "fingerprint": "b17"}})
    )
    capsys.readouterr()
    assert (
        main(
            [*args[:5], "--calibration", str(inproc), "--input", str(inp), "--out", str(tmp_path / "x.jsonl")]
        )
        == 1
    )
    assert "in-process" in capsys.readouterr().err


def test_a_server_capping_top_k_is_refused():
    import httpx

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        top = {"a": -0.1, "b": -2.5, "c": -3.0, "d": -4.0, "e": -5.0}  # capped at 5, like OpenAI's legacy API
        lp = {"tokens": ["a"], "token_logprobs": [-0.1], "top_logprobs": [top]}
        return httpx.Response(200, json={"choices": [{"text": "a", "logprobs": lp}]})

    c = EndpointClient(EndpointConfig("http://mock/v1"), transport=httpx.MockTransport(handler))
    c.require_top_k(5)
    with pytest.raises(EndpointCapabilityError, match="5 alternatives per position for logprobs=20") as e:
        c.require_top_k(20)
    assert "http://mock/v1" in str(e.value)


def test_a_server_that_tokenizes_differently_is_refused():
    """Unit level (mock transport): the server generated one token but re-tokenizes its answer into
    two, so positions cannot be aligned; the error names the endpoint and the record."""
    import httpx

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content or b"{}")
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        if request.url.path == "/extras/tokenize":
            return httpx.Response(200, json={"tokens": [ord(ch) for ch in body["input"]]})
        top = {"a": -0.1, "b": -2.5, "c": -3.0}
        lp = {"tokens": ["a"], "token_logprobs": [-0.1], "top_logprobs": [top]}
        if body.get("echo"):
            n = len(body["prompt"])
            lp = {"tokens": list(body["prompt"]), "token_logprobs": [-0.1] * n, "top_logprobs": [top] * n}
        text = "ab" if body.get("max_tokens", 1) > 1 else "a"
        usage = {"completion_tokens": 1}
        return httpx.Response(
            200, json={"choices": [{"text": text, "logprobs": lp, "finish_reason": "length"}], "usage": usage}
        )

    c = EndpointClient(
        EndpointConfig("http://mock/v1", method="echo"), transport=httpx.MockTransport(handler)
    )
    cfg = EndpointPairConfig(
        builder=PromptBuilder(template="A", chat=False), template=ChatTemplate(None), top_k=3
    )
    with pytest.raises(
        TokenAlignmentError, match="generated 1 tokens but re-tokenizes the answer into 2"
    ) as e:
        trace_endpoint_pair(c, "r1", "ctx", "q?", cfg)
    assert "http://mock/v1" in str(e.value) and "record r1" in str(e.value)


def test_closed_book_comparison_is_labelled_weaker(llama_server, capsys):
    from mnemoscope.cli.main import main

    args = ["audit", "--endpoint", llama_server.base_url, "--closed-book-test"]
    assert (
        main(
            [
                *args,
                "--context",
                "Quenmar lies on the river Zorblat.",
                "--query",
                "Which river is Quenmar on?",
            ]
        )
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert d["test"] == "closed-book-comparison" and "weaker" in d["label"] and "source" not in d
    assert "Zorblat" in d["answer_with_context"] and isinstance(d["same_answer"], bool)


def test_endpoint_audit_emits_the_audit_span(client, endpoint_profile):
    """One audit path: an endpoint audit runs the same AUDIT_HOOKS as in process (issue 24), so the
    OpenTelemetry span carries the verdict, the served model and the endpoint's own fields."""
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from mnemoscope.audit.auditor import Auditor, AuditRequest
    from mnemoscope.integrations import otel

    exp = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exp))
    otel.configure(tp)
    try:
        aud = Auditor.from_endpoint(client, endpoint_profile, check_identity=False)
        assert aud.limits == {"max_context_chars": 32_000, "max_query_chars": 4_000}
        assert aud.max_context_tokens is None  # a character cap is never called a token cap
        (res,) = aud.audit([AuditRequest("Quenmar lies on the Zorblat river.", "Which river is Quenmar on?")])
        (span,) = exp.get_finished_spans()
    finally:
        otel.configure(enabled=False)
    a = dict(span.attributes or {})
    assert span.name == otel.SPAN_NAME and a["openinference.span.kind"] == "EVALUATOR"
    assert a["mnemoscope.source"] == res.source
    assert a["mnemoscope.memory_flag"] == res.memory_flag
    assert a["llm.model_name"] == endpoint_profile.model["name"]
    assert a["mnemoscope.profile_hash"] == endpoint_profile.content_hash
    assert res.to_dict()["backend"] == "endpoint"


def test_one_logprobs_parser_reads_both_formats_alike() -> None:
    """Every endpoint path parses log-probs with ``choice_logprobs``: the legacy completions
    format and llama-server's chat-style one give the same tokens and top-k, malformed blocks are
    errors that name the problem, and a choice without log-probs is ``None``."""
    from mnemoscope.models.endpoint import choice_logprobs
    from mnemoscope.trace.endpoint import parse_logprobs
    from mnemoscope.trace.endpoint_score import served_scores

    legacy = {
        "logprobs": {
            "tokens": [" Paris", "."],
            "token_logprobs": [-0.1, -0.5],
            "top_logprobs": [{" Paris": -0.1, " Lyon": -3.0}, {".": -0.5, "!": -1.2}],
        }
    }
    chat = {
        "logprobs": {
            "content": [
                {
                    "token": " Paris",
                    "logprob": -0.1,
                    "id": 11,
                    "top_logprobs": [
                        {"token": " Paris", "logprob": -0.1, "id": 11},
                        {"token": " Lyon", "logprob": -3.0, "id": 12},
                        {"token": " Lyon", "logprob": -9.0, "id": 99},  # same spelling, less likely
                    ],
                },
                {
                    "token": ".",
                    "logprob": -0.5,
                    "id": 13,
                    "top_logprobs": [
                        {"token": ".", "logprob": -0.5, "id": 13},
                        {"token": "!", "logprob": -1.2, "id": 14},
                    ],
                },
            ]
        }
    }
    a, b = choice_logprobs(legacy), choice_logprobs(chat)
    assert a is not None and b is not None
    assert a.tokens == b.tokens == [" Paris", "."]
    assert a.token_logprobs == b.token_logprobs == [-0.1, -0.5]
    assert a.top_logprobs == b.top_logprobs  # the more probable " Lyon" is kept
    assert a.ids is None and b.ids == [11, 13] and b.top_ids is not None and b.top_ids[0][99] == -9.0
    assert parse_logprobs(legacy).top_logprobs == parse_logprobs(chat).top_logprobs
    s_legacy = served_scores({"choices": [legacy]})
    s_chat = served_scores({"choices": [chat]})
    assert s_legacy is not None and s_chat is not None and s_legacy.tops == s_chat.tops
    assert served_scores({"choices": [legacy]}, by_id=True) is None  # no ids in the legacy format
    by_id = served_scores({"choices": [chat]}, by_id=True)
    assert by_id is not None and by_id.ids == [11, 13]
    assert choice_logprobs({"text": "Paris"}) is None
    with pytest.raises(ValueError, match="different lengths"):
        choice_logprobs(
            {"logprobs": {"tokens": ["a", "b"], "token_logprobs": [-1.0], "top_logprobs": [{}, {}]}}
        )
    with pytest.raises(EndpointError, match="malformed"):
        parse_logprobs({"logprobs": {"content": [{"logprob": -1.0}]}}, what="echo")
    with pytest.raises(EndpointCapabilityError, match="no logprobs"):
        parse_logprobs({"text": "x"})
