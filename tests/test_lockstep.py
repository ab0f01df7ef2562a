"""Lockstep decoding equals the teacher-forced paired trace (answers, log-probs, KL, hidden states)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import tiny_lm
from mnemoscope.errors import InputError
from mnemoscope.trace import PairConfig, PairItem, Tracer
from mnemoscope.trace.lockstep import trace_lockstep
from mnemoscope.trace.pair import prepare_pair, trace_prepared
from mnemoscope.trace.types import PairTrace

ITEMS = [
    PairItem("a", "Quenmar lies on the Zorblat river.", "Which river?", 1),
    PairItem("b", "", "Which river?", 0),
    PairItem(
        "c", "A much longer context that states several invented facts about Vell the fox.", "Who is Vell?"
    ),
    PairItem("d", "Ka.", "A longer query than the others, to vary the no-context prompt length?"),
]
FIELDS = ("logprob_answer_with", "logprob_answer_without", "kl_steps", "kl_rev_steps", "entropy_with")
TOL = 1e-4


def _both(
    tracer: Tracer, items: list[PairItem], cfg: PairConfig, schedule: str = "auto"
) -> tuple[list[PairTrace], list[PairTrace]]:
    prepared = [prepare_pair(tracer, it, cfg) for it in items]
    return trace_lockstep(tracer, prepared, cfg, schedule=schedule), trace_prepared(tracer, prepared, cfg)  # type: ignore[arg-type]


def _assert_same(a: PairTrace, b: PairTrace) -> None:
    assert a.answer_ids.tolist() == b.answer_ids.tolist() and a.answer_with == b.answer_with
    for f in FIELDS:
        np.testing.assert_allclose(getattr(a, f), getattr(b, f), atol=TOL, rtol=0, err_msg=f)
    np.testing.assert_array_equal(a.topk_ids_with[:, 0], b.topk_ids_with[:, 0])
    if a.h_with is not None:
        # residual-stream values reach ~100 on real models: relative 1e-5 (measured ~1e-6 on SmolLM2)
        np.testing.assert_allclose(a.h_with, b.h_with, atol=TOL, rtol=1e-5)
        np.testing.assert_allclose(a.h_without, b.h_without, atol=TOL, rtol=1e-5)
    assert a.identical_prompts == b.identical_prompts and a.stopped_at_eos == b.stopped_at_eos


@pytest.mark.parametrize("schedule", ["lockstep", "fused"])
@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_lockstep_equals_teacher_forced_in_a_padded_batch(arch: str, schedule: str) -> None:
    lm = tiny_lm(arch)
    cfg = PairConfig(max_new_tokens=7, top_k=5)
    lock, tf = _both(Tracer(lm, batch_size=4), ITEMS, cfg, schedule)
    for a, b in zip(lock, tf, strict=True):
        _assert_same(a, b)
    empty = lock[1]
    assert empty.identical_prompts and float(np.max(empty.kl_steps)) < 1e-6


def test_batch_of_one_equals_batch_of_four(lm) -> None:  # type: ignore[no-untyped-def]
    cfg = PairConfig(max_new_tokens=6, top_k=5)
    many = trace_lockstep(Tracer(lm, batch_size=4), [prepare_pair(Tracer(lm), it, cfg) for it in ITEMS], cfg)
    one = trace_lockstep(Tracer(lm, batch_size=1), [prepare_pair(Tracer(lm), it, cfg) for it in ITEMS], cfg)
    for a, b in zip(many, one, strict=True):
        _assert_same(a, b)


@pytest.mark.parametrize("schedule", ["lockstep", "fused"])
def test_eos_mid_batch_stops_that_row_only(lm, schedule) -> None:  # type: ignore[no-untyped-def]
    cfg = PairConfig(max_new_tokens=6, top_k=5)
    full = trace_lockstep(Tracer(lm), [prepare_pair(Tracer(lm), ITEMS[0], cfg)], cfg)[0]
    stop = int(full.answer_ids[2])
    tracer = Tracer(lm, eos_token_ids=[stop], batch_size=4)
    lock, tf = _both(tracer, ITEMS, cfg, schedule)
    assert lock[0].stopped_at_eos and lock[0].n_steps == full.answer_ids.tolist().index(stop) + 1
    for a, b in zip(lock, tf, strict=True):
        _assert_same(a, b)


@pytest.mark.parametrize("schedule", ["lockstep", "fused"])
def test_forced_answer_equals_teacher_forcing(lm, schedule) -> None:  # type: ignore[no-untyped-def]
    cfg = PairConfig(max_new_tokens=6, top_k=5)
    tracer = Tracer(lm, batch_size=4)
    prepared = [prepare_pair(tracer, it, cfg) for it in ITEMS]
    gen = trace_lockstep(tracer, prepared, cfg, schedule=schedule)
    forced = [t.answer_ids.tolist() for t in gen]
    again = trace_lockstep(tracer, prepared, cfg, forced_answers=forced, schedule=schedule)
    for a, b in zip(again, gen, strict=True):
        _assert_same(a, b)
    # a different given answer is scored, not generated, and may run past T
    given = tracer.tokenizer("The river is Zorblat, of course.", add_special_tokens=False)["input_ids"]
    r = trace_lockstep(tracer, prepared[:1], cfg, forced_answers=[given])[0]
    assert r.answer_ids.tolist() == given and r.n_steps == len(given) > cfg.max_new_tokens
    with pytest.raises(InputError, match="empty"):
        trace_lockstep(tracer, prepared[:1], cfg, forced_answers=[[]])
    with pytest.raises(InputError, match="entries"):
        trace_lockstep(tracer, prepared, cfg, forced_answers=[None])
    with pytest.raises(InputError, match="schedule"):
        trace_lockstep(tracer, prepared, cfg, schedule="fast")  # type: ignore[arg-type]


def test_forced_and_generated_pairs_in_one_batch(lm) -> None:  # type: ignore[no-untyped-def]
    """A batch mixing given answers with generated ones decodes; a fully given batch does not
    decode at all (two teacher-forced forwards): both equal the teacher-forced trace."""
    cfg = PairConfig(max_new_tokens=6, top_k=5)
    tracer = Tracer(lm, batch_size=4)
    prepared = [prepare_pair(tracer, it, cfg) for it in ITEMS]
    gen = trace_lockstep(tracer, prepared, cfg)
    half = [t.answer_ids.tolist() if i % 2 else None for i, t in enumerate(gen)]
    for a, b in zip(trace_lockstep(tracer, prepared, cfg, forced_answers=half), gen, strict=True):
        _assert_same(a, b)
    calls = []
    handle = lm.model.register_forward_hook(lambda *a: calls.append(1))
    no_greedy = PairConfig(max_new_tokens=6, top_k=5, answer_without=False)
    try:
        trace_lockstep(tracer, prepared, no_greedy, forced_answers=[t.answer_ids.tolist() for t in gen])
    finally:
        handle.remove()
    assert len(calls) == 2  # one forward per path, no decoding steps


def test_no_hidden_states_when_not_asked(lm) -> None:  # type: ignore[no-untyped-def]
    cfg = PairConfig(max_new_tokens=3, top_k=3, hidden=False)
    t = trace_lockstep(Tracer(lm), [prepare_pair(Tracer(lm), ITEMS[0], cfg)], cfg)[0]
    assert t.h_with is None and t.n_steps == 3


@pytest.mark.real_model
def test_lockstep_equals_teacher_forced_on_the_default_model(real_lm) -> None:  # type: ignore[no-untyped-def]
    cfg = PairConfig(max_new_tokens=12, top_k=20)
    items = [
        PairItem(
            "q",
            "Quenmar is a small town. The river Zorblat runs through Quenmar.",
            "Which river runs through Quenmar?",
        ),
        PairItem("p", "Paris is the capital of France.", "What is the capital of France?"),
        PairItem("e", "", "What is the capital of Japan?"),
    ]
    lock, tf = _both(Tracer(real_lm, batch_size=3), items, cfg, "lockstep")
    fused = _both(Tracer(real_lm, batch_size=3), items, cfg, "fused")[0]
    worst = 0.0
    for a, b in zip([*lock, *fused], [*tf, *tf], strict=True):
        _assert_same(a, b)
        worst = max(worst, float(np.max(np.abs(a.logprob_answer_without - b.logprob_answer_without))))
    assert worst < TOL
