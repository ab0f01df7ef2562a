"""Stop sequences: an answer ends where an app would end it, at a token boundary, and every
statistic of the audit is computed on the cut answer only."""

from __future__ import annotations

import argparse
from contextlib import contextmanager
from dataclasses import replace

import numpy as np
import pytest
import torch

from mnemoscope.detectors.repcs import RePCS
from mnemoscope.errors import InputError
from mnemoscope.trace.lockstep import trace_lockstep
from mnemoscope.trace.pair import PairConfig, PairItem, cut_at_stop, prepare_pair, trace_prepared
from mnemoscope.trace.templates import DEFAULT_STOPS, PromptBuilder, default_stops, parse_stop
from mnemoscope.trace.tracer import Tracer


class PieceTokenizer:
    """A tokenizer whose tokens are multi-character pieces (``decode`` joins them)."""

    def __init__(self, pieces: list[str]):
        self.pieces = pieces

    def decode(self, ids, skip_special_tokens: bool = True):  # type: ignore[no-untyped-def]
        return "".join(self.pieces[i] for i in ids)


def test_cut_at_stop_keeps_whole_tokens_before_the_stop() -> None:
    pieces = [" Hollis", " Aber", "nathy", "-R", "uiz", "\n\n", "Context", ":", " Pip"]
    tok = PieceTokenizer(pieces)
    ids = list(range(len(pieces)))
    keep, cut = cut_at_stop(tok, ids, DEFAULT_STOPS)
    assert keep == 5 and tok.decode(ids[:keep]) == " Hollis Abernathy-Ruiz"
    assert cut == {"at": 22, "stop": "\n\n", "token": 5}
    # a token that holds the stop's start and text before it is dropped whole (token boundary)
    tok2 = PieceTokenizer([" Paris", ".\n", "\nQuestion", ":"])
    keep, cut = cut_at_stop(tok2, [0, 1, 2, 3], DEFAULT_STOPS)
    assert keep == 1 and cut is not None and cut["at"] == 7 and cut["stop"] == "\n\n"
    # no stop, or no stop sequences: nothing cut
    assert cut_at_stop(tok, [0, 1, 2], DEFAULT_STOPS) == (3, None)
    assert cut_at_stop(tok, ids, ()) == (len(ids), None)


def test_cut_pieces_at_stop_agrees_with_the_tokenizer_cut() -> None:
    from mnemoscope.trace.pair import cut_pieces_at_stop

    pieces = [" Hollis", " Aber", "nathy", "-R", "uiz", "\n\n", "Context", ":", " Pip"]
    tok = PieceTokenizer(pieces)
    ids = list(range(len(pieces)))
    for stops in (DEFAULT_STOPS, ("Aber",), ("\nContext:",), ("zzz",), ()):
        assert cut_pieces_at_stop(pieces, stops) == cut_at_stop(tok, ids, stops), stops
    assert cut_pieces_at_stop([" Paris", ".\n", "\nQuestion", ":"], DEFAULT_STOPS)[0] == 1


def test_cut_at_stop_ignores_a_leading_blank_line_and_keeps_one_token() -> None:
    tok = PieceTokenizer(["\n\n", " Paris", "\n\n", "Q"])
    keep, cut = cut_at_stop(tok, [0, 1, 2, 3], DEFAULT_STOPS)
    assert keep == 2 and cut is not None and cut["at"] == 8
    tok = PieceTokenizer(["A\n\nB"])  # the only token holds the stop: kept (never cut to nothing)
    assert cut_at_stop(tok, [0], DEFAULT_STOPS)[0] == 1


def test_parse_stop_and_defaults() -> None:
    assert parse_stop("\\n\\n") == "\n\n"
    assert parse_stop("\\nQuestion:") == "\nQuestion:"
    assert parse_stop("a\\tb\\\\n") == "a\tb\\n"
    assert parse_stop("\\x") == "\\x"  # an unknown escape is kept as typed
    with pytest.raises(InputError, match="stop"):
        parse_stop("")
    assert default_stops(chat=True) == () and default_stops(chat=False) == DEFAULT_STOPS
    with pytest.raises(InputError, match="stop"):
        PromptBuilder(stop=("",))


def test_stop_cli_option_parses_repeats_and_none() -> None:
    from mnemoscope.cli.options import add_stop_arg, stops_from_args

    p = argparse.ArgumentParser()
    add_stop_arg(p)
    assert stops_from_args(p.parse_args([])) is None  # not given: the profile's (or the layout default)
    assert stops_from_args(p.parse_args(["--stop", "\\n\\n", "--stop", "END"])) == ("\n\n", "END")
    assert stops_from_args(p.parse_args(["--stop", "none"])) == ()
    with pytest.raises(SystemExit):
        p.parse_args(["--stop", ""])


@contextmanager
def ascii_answers(lm):  # type: ignore[no-untyped-def]
    """The random tiny model writes readable text: a few letters, a space and a newline get a large
    logit bonus on every path (a forward hook on the LM head, removed afterwards)."""
    ids = [lm.tokenizer.encode(ch, add_special_tokens=False)[0] for ch in "abcdefgh \n"]
    bonus = torch.zeros(lm.model.config.vocab_size)
    bonus[ids] = 30.0

    def hook(_m, _inp, out):  # type: ignore[no-untyped-def]
        return out + bonus.to(out.dtype)

    handle = lm.model.get_output_embeddings().register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def _first_stop(text: str) -> str:
    """A two-character stop taken from the middle of a generated text (after its first non-blank)."""
    body = text.lstrip()
    start = len(text) - len(body)
    at = start + max(2, len(body) // 2)
    return text[at : at + 2]


@pytest.mark.parametrize("schedule", ["lockstep", "fused"])
def test_generation_stops_and_signals_use_the_cut_answer(lm, schedule: str) -> None:  # type: ignore[no-untyped-def]
    with ascii_answers(lm):
        tracer = Tracer(lm, batch_size=2)
        items = [
            PairItem("a", "Quenmar lies on the Zorblat.", "Which river?"),
            PairItem("b", "", "Which river?"),
        ]
        plain = PairConfig(
            builder=PromptBuilder(template="A", chat=False), max_new_tokens=24, answer_without=False
        )
        prepared = [prepare_pair(tracer, it, plain) for it in items]
        full = trace_lockstep(tracer, prepared, plain, schedule=schedule)  # type: ignore[arg-type]
        text = full[0].answer_with
        stop = _first_stop(text)
        assert stop and len(full[0].answer_ids) == 24
        cfg = replace(plain, builder=replace(plain.builder, stop=(stop,)))
        cut = trace_lockstep(tracer, [prepare_pair(tracer, it, cfg) for it in items], cfg, schedule=schedule)  # type: ignore[arg-type]
        t, u = cut[0], full[0]
        n = t.n_steps
        assert t.answer_cut is not None and t.answer_cut["stop"] == stop and t.answer_cut["token"] == n
        assert stop not in t.answer_with.lstrip() and n < u.n_steps
        # the cut answer is the uncut answer's first n tokens, and every per-step array its first n rows
        np.testing.assert_array_equal(t.answer_ids, u.answer_ids[:n])
        for name in ("kl_steps", "logprob_answer_with", "logprob_answer_without", "entropy_with"):
            np.testing.assert_allclose(getattr(t, name), getattr(u, name)[:n], atol=1e-4, err_msg=name)
        assert not t.stopped_at_eos
        # RePCS's Z is the one of the cut answer (the uncut answer's first n steps), not of the whole
        det = RePCS()
        prefix = replace(u, kl_steps=u.kl_steps[:n], kl_rev_steps=u.kl_rev_steps[:n])
        assert det.z([t])[0] == pytest.approx(det.z([prefix])[0], abs=1e-3)
        assert det.z([t])[0] != pytest.approx(det.z([u])[0], abs=1e-3)
        # the trace settings say which stops made it
        assert cfg.to_dict()["stop"] == [stop] and "stop" not in plain.to_dict()


def test_teacher_forced_path_cuts_the_same_way(lm) -> None:  # type: ignore[no-untyped-def]
    """trace_prepared (calibration's path: generate, cut, then teacher-force) cuts like lockstep."""
    with ascii_answers(lm):
        tracer = Tracer(lm, batch_size=2)
        item = PairItem("a", "Quenmar lies on the Zorblat.", "Which river?")
        plain = PairConfig(
            builder=PromptBuilder(template="A", chat=False), max_new_tokens=24, answer_without=True
        )
        u = trace_prepared(tracer, [prepare_pair(tracer, item, plain)], plain)[0]
        stop = _first_stop(u.answer_with)
        cfg = replace(plain, builder=replace(plain.builder, stop=(stop,)))
        t = trace_prepared(tracer, [prepare_pair(tracer, item, cfg)], cfg)[0]
        ls = trace_lockstep(tracer, [prepare_pair(tracer, item, cfg)], cfg)[0]
        assert t.answer_cut == ls.answer_cut and t.answer_cut is not None
        np.testing.assert_array_equal(t.answer_ids, ls.answer_ids)
        np.testing.assert_allclose(t.kl_steps, u.kl_steps[: t.n_steps], atol=1e-4)
        assert t.answer_without is not None and stop not in t.answer_without.lstrip()


def test_a_given_answer_is_never_cut(lm) -> None:  # type: ignore[no-untyped-def]
    tracer = Tracer(lm, batch_size=2)
    cfg = PairConfig(
        builder=PromptBuilder(chat=False, stop=DEFAULT_STOPS), max_new_tokens=8, answer_without=False
    )
    p = prepare_pair(tracer, PairItem("a", "ctx", "q?"), cfg)
    given = tracer.encode("Paris\n\nQuestion: more", chat=False)
    t = trace_lockstep(tracer, [p], cfg, forced_answers=[given])[0]
    assert t.answer_cut is None and t.n_steps == len(given)
