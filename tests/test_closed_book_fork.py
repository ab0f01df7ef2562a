"""The forked closed-book answer equals the one decoded from the prefill (and Tracer.generate's).

The lockstep decoder's closed-book answer (``PairConfig.answer_without``) follows the audited
answer until the no-context argmax differs from it, then forks from the no-context path's cache
(:mod:`mnemoscope.trace.lockstep`). ``_lockstep_batch(..., fork=False)`` is the decoder without
the fork (closed-book rows decoded from the prefill for all T steps): every case here must give
the same closed-book answers, under both schedules, at batch 1 and in padded batches, with
divergence at the first step, later, at an EOS step, never, and with given answers shorter or
longer than T.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from helpers import tiny_lm
from mnemoscope.trace import PairConfig, PairItem, Tracer
from mnemoscope.trace.lockstep import _lockstep_batch
from mnemoscope.trace.pair import PreparedPair, prepare_pair, trace_prepared
from mnemoscope.trace.templates import PromptBuilder
from mnemoscope.trace.tracer import batch_ranges
from mnemoscope.trace.types import PairTrace

# on the tiny llama (seed 0, T=8) these pairs' closed-book answers diverge from the answer at
# steps 1, 7 or never (plain prompts) and 0, 4 or never (chat prompts)
ITEMS = [
    PairItem(str(i), c, q)
    for i, (c, q) in enumerate(
        [
            ("Quenmar lies on the Zorblat river.", "Which river?"),
            ("", "Which river?"),
            (" ", "Which river?"),
            ("a", "Which river?"),
            ("Ka.", "A longer query?"),
            ("x", "Who?"),
            ("The", "Who is Vell?"),
            ("..", "Who is Vell?"),
            ("b", "b"),
            ("1", "2"),
        ]
    )
]
T = 8


@pytest.fixture(scope="module")
def lm() -> Any:
    return tiny_lm("llama")


def _run(
    tracer: Tracer,
    prepared: Sequence[PreparedPair],
    cfg: PairConfig,
    schedule: str,
    *,
    fork: bool,
    forced: Sequence[Sequence[int] | None] | None = None,
) -> list[PairTrace]:
    given = list(forced) if forced is not None else [None] * len(prepared)
    out: list[PairTrace] = []
    for idx in batch_ranges(len(prepared), tracer.batch_size):
        out.extend(
            _lockstep_batch(
                tracer,
                [prepared[i] for i in idx],
                [given[i] for i in idx],
                cfg,
                schedule,  # type: ignore[arg-type]
                fork=fork,
            )
        )
    return out


def _divergence(trace: PairTrace) -> int | None:
    """The first step where the closed-book answer differs from the answer (None: never)."""
    ans, closed = trace.answer_ids.tolist(), trace.answer_without_ids.tolist()
    return next((t for t, (a, c) in enumerate(zip(ans, closed, strict=False)) if a != c), None)


def _assert_same_closed(forked: list[PairTrace], carried: list[PairTrace]) -> None:
    for a, b in zip(forked, carried, strict=True):
        assert a.answer_ids.tolist() == b.answer_ids.tolist(), a.id
        assert a.answer_without_ids.tolist() == b.answer_without_ids.tolist(), a.id
        assert a.answer_without == b.answer_without
        assert a.n_steps == b.n_steps and a.answer_cut == b.answer_cut
        assert a.topk_ids_without[:, 0].tolist() == b.topk_ids_without[:, 0].tolist()


@pytest.mark.parametrize("batch_size", [1, 4])
@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("schedule", ["fused", "lockstep"])
def test_forked_closed_book_equals_the_carried_one(
    lm: Any, schedule: str, chat: bool, batch_size: int
) -> None:
    cfg = PairConfig(builder=PromptBuilder(chat=chat), max_new_tokens=T, top_k=3)
    tracer = Tracer(lm, batch_size=batch_size)
    prepared = [prepare_pair(tracer, it, cfg) for it in ITEMS]
    forked = _run(tracer, prepared, cfg, schedule, fork=True)
    _assert_same_closed(forked, _run(tracer, prepared, cfg, schedule, fork=False))
    # and the answer Tracer.generate gives on the no-context prompt
    ref = trace_prepared(tracer, prepared, cfg)
    assert [t.answer_without_ids.tolist() for t in forked] == [t.answer_without_ids.tolist() for t in ref]
    steps = {_divergence(t) for t in forked}
    assert None in steps and any(d is not None and d > 0 for d in steps)
    assert chat or 7 in steps  # the last step
    assert not chat or 0 in steps


@pytest.mark.parametrize("eos", [29, 110, 202])
@pytest.mark.parametrize("schedule", ["fused", "lockstep"])
def test_eos_on_either_path(lm: Any, schedule: str, eos: int) -> None:
    """EOS ends both answers at the same step, or only the answer (its no-context argmax there
    differs: a divergence at the EOS step), or only the closed-book answer."""
    cfg = PairConfig(max_new_tokens=T, top_k=3)
    for batch_size in (1, 3):
        tracer = Tracer(lm, eos_token_ids=[eos], batch_size=batch_size)
        prepared = [prepare_pair(tracer, it, cfg) for it in ITEMS]
        forked = _run(tracer, prepared, cfg, schedule, fork=True)
        _assert_same_closed(forked, _run(tracer, prepared, cfg, schedule, fork=False))
        assert any(t.stopped_at_eos for t in forked)
        closed_eos = [t.answer_without_ids.tolist()[-1] == eos for t in forked]
        if eos == 29:  # both paths end at EOS
            assert any(t.stopped_at_eos and c for t, c in zip(forked, closed_eos, strict=True))
        if eos == 110:  # the answer ends at EOS where the no-context argmax differs
            assert any(t.stopped_at_eos and not c for t, c in zip(forked, closed_eos, strict=True))


@pytest.mark.parametrize("stop", [":", "$", "0", "k"])
@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("schedule", ["fused", "lockstep"])
def test_stop_sequences(lm: Any, schedule: str, chat: bool, stop: str) -> None:
    """The closed-book answer stops decoding at a stop sequence and is cut the same way, also
    when it follows an answer that was cut (the no-context path is scored past the cut)."""
    cfg = PairConfig(builder=PromptBuilder(chat=chat, stop=(stop,)), max_new_tokens=T, top_k=3)
    tracer = Tracer(lm, batch_size=5)
    prepared = [prepare_pair(tracer, it, cfg) for it in ITEMS]
    forked = _run(tracer, prepared, cfg, schedule, fork=True)
    _assert_same_closed(forked, _run(tracer, prepared, cfg, schedule, fork=False))
    one = _run(Tracer(lm, batch_size=1), prepared, cfg, schedule, fork=True)
    _assert_same_closed(one, forked)


@pytest.mark.parametrize("schedule", ["fused", "lockstep"])
def test_given_answers_diverging_at_chosen_steps(lm: Any, schedule: str) -> None:
    """Given answers control the fork: the closed-book answer with one token changed at step d
    (a divergence at d), itself whole (none), cut short (the row forks where the answer ends),
    longer than T, and ending in EOS; in one padded batch with a generated pair."""
    for chat in (False, True):
        cfg = PairConfig(builder=PromptBuilder(chat=chat), max_new_tokens=T, top_k=3)
        for eos in (None, 202):
            tracer = Tracer(lm, eos_token_ids=[eos] if eos is not None else None, batch_size=16)
            pairs = [prepare_pair(tracer, it, cfg) for it in ITEMS[:2]]
            closed = [t.answer_without_ids.tolist() for t in _run(tracer, pairs, cfg, schedule, fork=False)]
            prepared: list[PreparedPair] = [pairs[0]]
            forced: list[list[int] | None] = [None]
            for p, g in zip(pairs, closed, strict=True):
                variants = [list(g), g[:3], [*g, 5, 6, 7, 8], [*g[:2], 2]]
                for d in (0, 2, 5):
                    if d < len(g):
                        variants.append([*g[:d], 40 if g[d] != 40 else 41, *g[d + 1 :]])
                for v in variants:
                    prepared.append(p)
                    forced.append(v)
            forked = _run(tracer, prepared, cfg, schedule, fork=True, forced=forced)
            _assert_same_closed(forked, _run(tracer, prepared, cfg, schedule, fork=False, forced=forced))
            for t, f in zip(forked[1:], forced[1:], strict=True):
                assert t.answer_ids.tolist() == f


def test_fused_batch_of_one_decodes_no_closed_book_row_without_divergence(lm: Any) -> None:
    """Identical prompts: the closed-book answer is the answer, and no step decodes a second row."""
    cfg = PairConfig(max_new_tokens=T, top_k=3)
    tracer = Tracer(lm, batch_size=1)
    p = prepare_pair(tracer, ITEMS[1], cfg)
    rows: list[int] = []
    handle = lm.model.register_forward_hook(
        lambda m, args, kw, out: rows.append(kw["input_ids"].shape[0]), with_kwargs=True
    )
    try:
        t = _lockstep_batch(tracer, [p], [None], cfg, "fused")[0]
    finally:
        handle.remove()
    assert t.answer_without_ids.tolist() == t.answer_ids.tolist()
    assert rows == [1] * (t.n_steps + 1)  # prefill + n-1 steps + the no-context forward


@pytest.mark.parametrize("arch", ["gpt2", "qwen2", "gemma3_text"])
@pytest.mark.parametrize("schedule", ["fused", "lockstep"])
def test_other_architectures(arch: str, schedule: str) -> None:
    """Position ids from another family; sliding-window layers (no fused fork: the fallback)."""
    lm = tiny_lm(arch)
    cfg = PairConfig(max_new_tokens=T, top_k=3)
    tracer = Tracer(lm, batch_size=4)
    prepared = [prepare_pair(tracer, it, cfg) for it in ITEMS[:6]]
    forked = _run(tracer, prepared, cfg, schedule, fork=True)
    _assert_same_closed(forked, _run(tracer, prepared, cfg, schedule, fork=False))
