"""Tracer: hidden-state indexing, batching, log-probs, attentions, hook hygiene."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers import tiny_lm
from mnemoscope.trace import Capture, Tracer
from mnemoscope.trace.hooks import StateCapture, registered_hooks

PROMPTS = ["The river", "A much longer prompt about a city by a river", "x", "Zorblat flows past Quenmar."]


def _reference(lm, prompt):
    ids = torch.tensor([lm.tokenizer(prompt)["input_ids"]])
    with torch.no_grad():
        out = lm.model(input_ids=ids, output_hidden_states=True)
    return torch.stack(out.hidden_states)[:, 0].numpy(), out.logits[0].log_softmax(-1).numpy()


def _all_hooks(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3_text", "gpt2", "gpt_neox"])
def test_hidden_matches_output_hidden_states(arch):
    lm = tiny_lm(arch)
    assert lm.arch is not None, "architecture table should cover this model"
    traces = Tracer(lm, batch_size=1).trace(PROMPTS[:2])
    for prompt, t in zip(PROMPTS[:2], traces, strict=True):
        ref_h, ref_lp = _reference(lm, prompt)
        assert t.hidden.shape == (lm.info.n_layers + 1, lm.info.hidden_size)
        np.testing.assert_allclose(t.hidden, ref_h[:, -1], atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(t.logprobs, ref_lp[-1], atol=1e-5)
        # hidden[L] is after the final norm; hidden_prenorm is the last block's raw output.
        from mnemoscope.models.arch import get_module

        norm = get_module(lm.model, lm.arch.final_norm)
        with torch.no_grad():
            renormed = norm(torch.from_numpy(t.hidden_prenorm)[None, None])[0, 0].numpy()
        np.testing.assert_allclose(renormed, t.hidden[-1], atol=1e-5)
        assert not np.allclose(t.hidden_prenorm, t.hidden[-1])


def test_fallback_without_arch_matches_hooks(lm):
    from dataclasses import replace

    hooked = Tracer(lm).trace(PROMPTS)
    fallback = Tracer(replace(lm, arch=None)).trace(PROMPTS)
    for a, b in zip(hooked, fallback, strict=True):
        np.testing.assert_allclose(a.hidden, b.hidden, atol=1e-6)
        assert b.hidden_prenorm is None  # not measurable without the module map: explicit None


@pytest.mark.parametrize("arch", ["llama", "gpt2", "gemma3_text", "qwen2"])
def test_batched_equals_unbatched(arch):
    lm = tiny_lm(arch)
    cap = Capture(hidden="last", logprobs="all")
    batched = Tracer(lm, batch_size=4).trace(PROMPTS, capture=cap)
    single = Tracer(lm, batch_size=1).trace(PROMPTS, capture=cap)
    for a, b in zip(batched, single, strict=True):
        np.testing.assert_array_equal(a.token_ids, b.token_ids)
        np.testing.assert_allclose(a.hidden, b.hidden, atol=1e-5)
        np.testing.assert_allclose(a.logprobs_all, b.logprobs_all, atol=1e-5)
        assert a.logprobs_all.shape == (a.n_tokens, lm.info.vocab_size)


def test_all_positions_match_reference(lm):
    cap = Capture(hidden="all", logprobs="all")
    traces = Tracer(lm, batch_size=3).trace(PROMPTS[:3], capture=cap)
    for prompt, t in zip(PROMPTS[:3], traces, strict=True):
        ref_h, ref_lp = _reference(lm, prompt)
        assert t.hidden_all.shape == (lm.info.n_layers + 1, t.n_tokens, lm.info.hidden_size)
        np.testing.assert_allclose(t.hidden_all, ref_h, atol=1e-5)
        np.testing.assert_allclose(t.logprobs_all, ref_lp, atol=1e-5)
        np.testing.assert_allclose(t.hidden_all[:, -1], t.hidden, atol=0)
        assert t.hidden_prenorm_all.shape == (t.n_tokens, lm.info.hidden_size)


def test_capture_none_keeps_nothing(lm):
    t = Tracer(lm).trace(["abc"], capture=Capture(hidden="none", logprobs="none"))[0]
    assert t.hidden is None and t.logprobs is None and t.hidden_all is None


def test_attentions_eager_only_while_needed(lm):
    before = lm.model.config._attn_implementation
    cap = Capture(attentions=True)
    batched = Tracer(lm, batch_size=4).trace(PROMPTS, capture=cap)
    single = Tracer(lm, batch_size=1).trace(PROMPTS, capture=cap)
    assert lm.model.config._attn_implementation == before
    for a, b in zip(batched, single, strict=True):
        n = a.n_tokens
        assert a.attentions.shape == (lm.info.n_layers, lm.info.n_heads, n, n)
        np.testing.assert_allclose(a.attentions.sum(-1), 1.0, atol=1e-5)
        assert np.allclose(np.triu(a.attentions, k=1), 0)  # causal
        np.testing.assert_allclose(a.attentions, b.attentions, atol=1e-5)


def test_hooks_removed_after_exception(lm):
    baseline = _all_hooks(lm.model)  # transformers registers a few of its own
    cap = StateCapture(lm.model, lm.arch, torch.tensor([0]), all_positions=False)
    with pytest.raises(ZeroDivisionError), registered_hooks(cap.specs()):
        assert _all_hooks(lm.model) == baseline + lm.info.n_layers + 2
        1 / 0  # noqa: B018
    assert _all_hooks(lm.model) == baseline
    # A failing forward inside the tracer (token id outside the vocabulary) leaves no hook either.
    with pytest.raises((IndexError, RuntimeError)):
        Tracer(lm).trace([[1, 2, 10_000]])
    assert _all_hooks(lm.model) == baseline


def test_memory_is_per_layer_not_per_position(lm):
    long_prompt = "word " * 60
    t = Tracer(lm).trace([long_prompt])[0]
    assert t.hidden.shape == (lm.info.n_layers + 1, lm.info.hidden_size)
    assert t.n_tokens > 100


def test_token_ids_input_and_strings(lm):
    ids = lm.tokenizer("hello")["input_ids"]
    a = Tracer(lm).trace([ids])[0]
    b = Tracer(lm).trace(["hello"])[0]
    np.testing.assert_allclose(a.hidden, b.hidden, atol=0)
    assert "".join(b.tokens) == "hello"


def test_float64_agrees_with_float32():
    lm32 = tiny_lm("llama")
    lm64 = tiny_lm("llama")
    lm64.model.to(torch.float64)
    a = Tracer(lm32).trace(PROMPTS)
    b = Tracer(lm64).trace(PROMPTS)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x.hidden, y.hidden, atol=1e-4, rtol=1e-4)


def test_generate_matches_hf_generate_and_batches(lm):
    tr1, tr4 = Tracer(lm, batch_size=1), Tracer(lm, batch_size=4)
    seqs = [lm.tokenizer(p)["input_ids"] for p in PROMPTS]
    a, b = tr1.generate(seqs, 6), tr4.generate(seqs, 6)
    assert a == b
    with torch.no_grad():
        ref = lm.model.generate(torch.tensor([seqs[0]]), max_new_tokens=6, do_sample=False, pad_token_id=3)
    expected = ref[0, len(seqs[0]) :].tolist()
    assert a[0] == expected[: len(a[0])]


def test_empty_and_too_long_prompts_raise_input_error():
    from mnemoscope.errors import InputError

    lm = tiny_lm("llama", max_positions=16)
    with pytest.raises(InputError, match="empty"):
        Tracer(lm).trace([""])
    with pytest.raises(InputError, match="window of 16"):
        Tracer(lm).trace(["x" * 40])


def test_token_stats_match_direct_computation(lm):
    cap = Capture(hidden="none", logprobs="none", token_stats=True)
    traces = Tracer(lm, batch_size=4).trace(PROMPTS, capture=cap)
    for prompt, t in zip(PROMPTS, traces, strict=True):
        _, ref_lp = _reference(lm, prompt)
        lp = ref_lp[:-1].astype(np.float64)
        ids = t.token_ids[1:]
        assert t.token_logprobs.shape == (t.n_tokens - 1,)
        np.testing.assert_allclose(t.token_logprobs, lp[np.arange(len(ids)), ids], atol=1e-5)
        p = np.exp(lp)
        mu = (p * lp).sum(-1)
        np.testing.assert_allclose(t.token_mu, mu, atol=1e-5)
        np.testing.assert_allclose(t.token_sigma, np.sqrt((p * (lp - mu[:, None]) ** 2).sum(-1)), atol=1e-4)
        assert t.logprobs is None and t.hidden is None


def test_logits_budget_splits_batches_and_changes_no_statistic(lm, monkeypatch):
    """With all-position logits, a batch is split so its [rows width vocab] logits fit the
    budget (memory bounded by the budget, not by batch x length x vocabulary); the token
    statistics are the same as with one forward per batch, and in the same order."""
    cap = Capture(hidden="none", logprobs="none", token_stats=True)
    prompts = [p * (1 + i % 3) for i, p in enumerate(PROMPTS * 2)]
    whole = Tracer(lm, batch_size=len(prompts), logits_budget_mb=1e6)
    per_row_mb = 4 * whole.vocab_size / 2**20
    longest = max(len(whole.encode(p)) for p in prompts)
    tight = Tracer(lm, batch_size=len(prompts), logits_budget_mb=2.5 * longest * per_row_mb)
    calls: list[int] = []
    forward = tight.forward

    def counting(seqs, **kw):  # type: ignore[no-untyped-def]
        calls.append(len(seqs))
        width = max(len(s) for s in seqs)
        assert len(seqs) == 1 or len(seqs) * width * per_row_mb <= tight.logits_budget_mb
        return forward(seqs, **kw)

    monkeypatch.setattr(tight, "forward", counting)
    a, b = whole.trace(prompts, capture=cap), tight.trace(prompts, capture=cap)
    assert len(calls) > 1 and sum(calls) == len(prompts)
    for x, y in zip(a, b, strict=True):
        assert x.prompt == y.prompt
        np.testing.assert_allclose(x.token_logprobs, y.token_logprobs, atol=1e-5)
        np.testing.assert_allclose(x.token_sigma, y.token_sigma, atol=1e-4)
    with pytest.raises(ValueError, match="logits_budget_mb"):
        Tracer(lm, logits_budget_mb=0)
