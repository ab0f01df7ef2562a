"""Paired tracing: alignment, KL, generation, batching, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers import tiny_lm
from mnemoscope.errors import InputError
from mnemoscope.trace import PairConfig, PairItem, PromptBuilder, Tracer, trace_pairs

ITEMS = [
    PairItem("a", "Quenmar lies on the Zorblat river.", "Which river?", 1),
    PairItem("b", "", "Which river?", 0),
    PairItem("c", "A much longer context that states several invented facts about Vell.", "Who is Vell?"),
]


@pytest.fixture(scope="module")
def cfg():
    return PairConfig(max_new_tokens=6, answer_without=True, top_k=5)


def _direct_logprobs(lm, prompt_ids, answer):
    """log p(. | prompt, y_<t) for t = 1..|y| from one plain forward over prompt + y."""
    seq = torch.tensor([prompt_ids + answer])
    with torch.no_grad():
        logits = lm.model(input_ids=seq).logits[0]
    n = len(answer)
    return logits[len(prompt_ids) - 1 : len(prompt_ids) - 1 + n].double().log_softmax(-1)


def test_teacher_forced_distributions_equal_direct_forward(lm, cfg):
    tracer = Tracer(lm, batch_size=3)
    for pt in trace_pairs(tracer, ITEMS, cfg):
        ans = pt.answer_ids.tolist()
        ids_w = tracer.encode(pt.prompt_with)
        ids_o = tracer.encode(pt.prompt_without)
        lw, lo = _direct_logprobs(lm, ids_w, ans), _direct_logprobs(lm, ids_o, ans)
        kl = (lw.exp() * (lw - lo)).sum(-1).numpy()
        kl_rev = (lo.exp() * (lo - lw)).sum(-1).numpy()
        np.testing.assert_allclose(pt.kl_steps, kl, atol=1e-5)
        np.testing.assert_allclose(pt.kl_rev_steps, kl_rev, atol=1e-5)
        y = torch.tensor(ans)[:, None]
        np.testing.assert_allclose(pt.logprob_answer_without, lo.gather(-1, y)[:, 0].numpy(), atol=1e-5)
        np.testing.assert_allclose(pt.logprob_answer_with, lw.gather(-1, y)[:, 0].numpy(), atol=1e-5)
        np.testing.assert_allclose(pt.topk_logprobs_without, lo.topk(5).values.numpy(), atol=1e-5)
        np.testing.assert_allclose(pt.entropy_with, -(lw.exp() * lw).sum(-1).numpy(), atol=1e-5)
        # Greedy: each answer token is the argmax of the teacher-forced with-context distribution.
        np.testing.assert_array_equal(pt.topk_ids_with[:, 0], pt.answer_ids)


def test_hidden_states_are_the_last_prompt_token(lm, cfg):
    tracer = Tracer(lm)
    pt = trace_pairs(tracer, ITEMS[:1], cfg)[0]
    tw, to = tracer.trace([pt.prompt_with, pt.prompt_without])
    np.testing.assert_allclose(pt.h_with, tw.hidden, atol=1e-5)
    np.testing.assert_allclose(pt.h_without, to.hidden, atol=1e-5)
    np.testing.assert_allclose(pt.h_with_prenorm, tw.hidden_prenorm, atol=1e-5)
    assert pt.displacement.shape == (lm.info.n_layers + 1, lm.info.hidden_size)


def test_kl_zero_for_identical_prompts_positive_otherwise(lm, cfg):
    alone = trace_pairs(Tracer(lm, batch_size=1), [ITEMS[1]], cfg)[0]
    assert alone.identical_prompts
    assert np.all(alone.kl_steps == 0.0) and np.all(alone.kl_rev_steps == 0.0)
    np.testing.assert_array_equal(alone.h_with, alone.h_without)
    mixed = trace_pairs(Tracer(lm, batch_size=3), ITEMS, cfg)
    assert mixed[1].identical_prompts and mixed[1].kl_steps.max() < 1e-6
    assert not mixed[0].identical_prompts
    assert mixed[0].kl_steps.min() > 0 and mixed[0].kl_mean > 1e-4


def test_batched_pairs_equal_unbatched(lm, cfg):
    a = trace_pairs(Tracer(lm, batch_size=3), ITEMS, cfg)
    b = trace_pairs(Tracer(lm, batch_size=1), ITEMS, cfg)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.answer_ids, y.answer_ids)
        np.testing.assert_allclose(x.kl_steps, y.kl_steps, atol=1e-5)
        np.testing.assert_allclose(x.h_with, y.h_with, atol=1e-5)
        np.testing.assert_allclose(x.h_without, y.h_without, atol=1e-5)
        assert x.answer_without == y.answer_without


def test_answer_without_is_greedy_no_context_generation(lm, cfg):
    tracer = Tracer(lm)
    pt = trace_pairs(tracer, ITEMS[:1], cfg)[0]
    expected = tracer.generate([tracer.encode(pt.prompt_without)], cfg.max_new_tokens)[0]
    np.testing.assert_array_equal(pt.answer_without_ids, expected)
    off = trace_pairs(tracer, ITEMS[:1], PairConfig(max_new_tokens=6, answer_without=False))[0]
    assert off.answer_without is None and off.answer_without_ids is None


def test_early_eos_gives_fewer_steps(lm, cfg):
    tracer = Tracer(lm)
    full = trace_pairs(tracer, ITEMS[:1], cfg)[0]
    assert full.n_steps == 6
    stop_token = int(full.answer_ids[2])  # declare the 3rd generated token an EOS
    short = trace_pairs(Tracer(lm, eos_token_ids=[stop_token]), ITEMS[:1], cfg)[0]
    first = full.answer_ids.tolist().index(stop_token)
    assert short.n_steps == first + 1 and short.stopped_at_eos
    np.testing.assert_allclose(short.kl_steps, full.kl_steps[: first + 1], atol=1e-5)


def test_templates_and_chat(lm):
    tracer = Tracer(lm)
    for name in "ABCD":
        pt = trace_pairs(
            tracer, ITEMS[:1], PairConfig(builder=PromptBuilder(template=name), max_new_tokens=2)
        )[0]
        assert "Quenmar" in pt.prompt_with and "Quenmar" not in pt.prompt_without
        assert pt.template["template"] == name
    chat = trace_pairs(tracer, ITEMS[:1], PairConfig(builder=PromptBuilder(chat=True), max_new_tokens=2))[0]
    assert chat.prompt_with.startswith("<s>user: Context: Quenmar")
    assert chat.prompt_with.endswith("assistant:")
    # the chat prompt carries its own <s>; tokenizing must not add another
    assert tracer.encode(chat.prompt_with, chat=True).count(1) == 1


def test_bad_pairs_name_record_and_field():
    lm = tiny_lm("llama", max_positions=64)
    tracer = Tracer(lm)
    with pytest.raises(InputError, match=r"record q1.*'query'.*empty"):
        trace_pairs(tracer, [PairItem("q1", "ctx", "   ")])
    with pytest.raises(InputError, match=r"record long.*'context'.*window of 64"):
        trace_pairs(tracer, [PairItem("long", "x" * 80, "q?")], PairConfig(max_new_tokens=4))
    with pytest.raises(InputError, match="max_new_tokens"):
        PairConfig(max_new_tokens=0)


def test_online_kl_agrees_with_paired_trace(lm):
    from mnemoscope.trace.pair import online_kl, prepare_pair

    tracer = Tracer(lm, batch_size=1)
    cfg = PairConfig(max_new_tokens=6)
    for item in ITEMS:
        full = trace_pairs(tracer, [item], cfg)[0]
        fast = online_kl(tracer, prepare_pair(tracer, item, cfg), 6)
        np.testing.assert_array_equal(fast.answer_ids, full.answer_ids)
        np.testing.assert_allclose(fast.kl_steps, full.kl_steps, atol=1e-4)
