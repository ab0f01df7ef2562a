"""The three-way source: query-copied words, the content-word test, ``mixed``, and how they are shown."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mnemoscope.audit.verdict import decide_source, source_evidence
from mnemoscope.features.attribution import (
    answer_words,
    attribute_tokens,
    content_word,
    context_token_fraction,
    merge_spans,
    query_terms,
    supported_by,
)

LOG2 = math.log(2)


def _attr(pieces, top1, pmi_gain, query):  # type: ignore[no-untyped-def]
    """Attribution where every token is the no-context top-1 (``top1``) and the context multiplies
    its probability by ``pmi_gain`` (1 = no gain)."""
    n = len(pieces)
    lo = np.full(n, 0.5)
    lw = np.clip(lo * np.asarray(pmi_gain, dtype=float), 1e-6, 1.0)
    return attribute_tokens(
        pieces=pieces,
        logp_with=np.log(lw),
        logp_without=np.log(lo),
        kl=np.zeros(n),
        top1_without=np.asarray(top1, dtype=bool),
        query=query,
        margin=LOG2,
    )


# the two answers of issue 27: every word the model writes is its no-context top-1 (memory-like)
HASK = [
    " The",
    " comet",
    " H",
    "ask",
    "-",
    "Del",
    "ano",
    " was",
    " discovered",
    " in",
    " 1",
    "9",
    "7",
    "3",
    ".",
]
SKIPPER = [" The", " Qu", "ellan", " sand", "-", "sk", "ipper", " has", " ", "1", "4", " legs", "."]


def test_query_copied_words_are_never_memory_hask_delano() -> None:
    pieces = HASK
    q = "When was the comet Hask-Delano discovered?"
    toks = _attr(pieces, [True] * len(pieces), [1.0] * len(pieces), q)
    src = {t.text: t.source for t in toks}
    for piece in (" comet", " H", "ask", "Del", "ano", " discovered"):
        assert src[piece] == "query", piece
    assert src[" 1"] == src["9"] == "memory"  # the year is not in the query: memory stays possible
    assert not any(t.source == "memory" for t in toks if t.text in (" H", "ask", "Del", "ano"))


def test_query_copied_words_are_never_memory_sand_skipper() -> None:
    q = "How many legs does the Quellan sand-skipper have?"
    # the context raises "14" (context), every other word is predicted without it
    gain = [1.0] * len(SKIPPER)
    gain[9] = gain[10] = 1.9
    top1 = [True] * len(SKIPPER)
    top1[9] = top1[10] = False
    toks = _attr(SKIPPER, top1, gain, q)
    src = {t.text: t.source for t in toks}
    assert src[" Qu"] == src["ellan"] == src[" sand"] == src["sk"] == src["ipper"] == src[" legs"] == "query"
    assert src["1"] == src["4"] == "context"
    assert context_token_fraction(toks) == 1.0  # query words are neither side of the fraction
    spans = [(s.text, s.source) for s in merge_spans(toks) if s.source != "neutral"]
    assert ("Quellan sand", "query") in spans or ("Quellan", "query") in spans
    assert ("14", "context") in spans
    # the item: the only content word is context-supported -> not mixed, not memory
    src_item, _ = decide_source(
        identical_prompts=False,
        answer="".join(SKIPPER),
        memory_flag=False,
        p_memory=0.1,
        tokens=toks,
        query=q,
        context="The Quellan sand-skipper is a beetle of the dunes. It has 14 legs.",
    )
    assert src_item == "context"


def test_query_normalisation_case_punctuation_inflection() -> None:
    q = query_terms("Which LEGS did the sand-skipper's mother discover, and where?")
    for w in ("legs", "Leg", "skipper", "Sand-Skippers", "discovered", "discovers", "mothers", "skipper's"):
        assert supported_by(w, q), w
    for w in ("Discovery", "beetle", "14", "", "-"):
        assert not supported_by(w, q), w


@pytest.mark.parametrize(
    ("word", "n_tokens", "expected"),
    [
        ("Paris", None, True),  # a name
        ("1948", None, True),  # a number
        ("F-16", None, True),
        ("mRNA", None, True),  # a capital inside: a term
        ("東京", None, True),  # no case in the script: counted
        ("Москва", None, True),
        ("painting", 1, False),  # a common word, one token
        ("written", None, False),
        ("photosynthesis", 3, True),  # rare for the tokenizer: a term
        ("The", None, False),  # function word, capitalised at a sentence start
        ("However", None, False),  # discourse word
        ("Context", None, True),  # capitalised: only the stop sequence keeps it out of an answer
        ("...", None, False),
    ],
)
def test_content_word(word: str, n_tokens: int | None, expected: bool) -> None:
    assert content_word(word, n_tokens=n_tokens) is expected


def test_content_word_excludes_query_words() -> None:
    q = query_terms("Which key is F-sharp minor in?")
    assert not content_word("F-sharp", q) and not content_word("F", q)
    assert content_word("Bach", q)


def _words(spec):  # type: ignore[no-untyped-def]
    """tokens from ``[(text, source), ...]`` (one token per word)."""
    from mnemoscope.features.attribution import TokenAttribution

    out, pos = [], 0
    for text, src in spec:
        out.append(TokenAttribution(text, src, 0.0, 0.0, 0.0, 0.0, 0.0, pos, pos + len(text)))
        pos += len(text)
    return out


def test_mixed_needs_an_unsupported_memory_content_word_next_to_a_context_one() -> None:
    q = "Who painted the Tin Comet?"
    ctx = "Pip and the Tin Comet is a picture book by Hollis Abernathy-Ruiz."
    kw = {"identical_prompts": False, "p_memory": 0.2, "memory_flag": False, "query": q, "context": ctx}
    # an invented detail from memory next to a context name: mixed, naming the word
    toks = _words([("Hollis", "context"), (" Abernathy", "context"), (" in", "neutral"), (" 1962", "memory")])
    src, why = decide_source(answer="Hollis Abernathy in 1962", tokens=toks, **kw)
    assert src == "mixed" and "1962" in why
    # memory-attributed words that are query words or common words are not evidence
    toks = _words([("Hollis", "context"), (" Tin", "memory"), (" painting", "memory"), (" Comet", "memory")])
    assert decide_source(answer="x", tokens=toks, **kw)[0] == "context"
    # a memory word the context itself contains is supported: no memory evidence
    toks = _words([("Hollis", "context"), (" Pip", "memory")])
    assert decide_source(answer="x", tokens=toks, **kw)[0] == "context"
    ev_ctx, ev_mem = source_evidence(
        answer_words(_words([("Hollis", "context"), (" Zorb", "memory")])), query=q
    )
    assert [w.text for w in ev_ctx] == ["Hollis"] and [w.text for w in ev_mem] == ["Zorb"]
    # flagged: memory unless an unsupported memory word sits next to a context one
    toks = _words([("Hollis", "context"), (" Pip", "memory")])
    assert decide_source(answer="x", tokens=toks, **{**kw, "memory_flag": True})[0] == "memory"
    toks = _words([("Hollis", "context"), (" Verne", "memory")])
    assert decide_source(answer="x", tokens=toks, **{**kw, "memory_flag": True})[0] == "mixed"


def test_render_marks_query_words_distinctly() -> None:
    from mnemoscope.cli.render import render_audit

    d = {
        "answer": "The comet Hask-Delano was found in 1973.",
        "spans": [
            {"source": "query", "start": 10, "end": 21, "text": "Hask-Delano"},
            {"source": "context", "start": 35, "end": 39, "text": "1973"},
        ],
        "source": "context",
        "p_memory": 0.1,
        "summary": "s",
        "evidence": {},
        "guarantee": {},
        "rule": "combined",
        "answer_cut": {"at": 40, "token": 12, "stop": "\n\n"},
    }
    out = render_audit(d, colour=False)
    assert "The comet [q: Hask-Delano] was found in [ctx: 1973]." in out
    assert "[q: ...] = copied from the query" in out
    assert "ends at stop sequence '\\n\\n' (character 40, after 12 tokens)" in out
    assert "\033[4;36mHask-Delano" in render_audit(d, colour=True)


def test_leaning_memory_without_flag_is_context_when_what_it_names_is_context_supported() -> None:
    kw = {
        "identical_prompts": False,
        "p_memory": 0.8,
        "memory_flag": False,
        "query": "Who?",
        "context": "Kiaso Kryntel did.",
    }
    src, why = decide_source(answer="x", tokens=_words([("Kiaso", "context"), (" Kryntel", "context")]), **kw)
    assert src == "context" and "Kiaso" in why and "under the calibrated threshold" in why
    # nothing it names is context-supported: it stays undetermined (leans memory, no flag)
    assert decide_source(answer="x", tokens=_words([("Paris", "memory")]), **kw)[0] == "undetermined"
    assert decide_source(answer="x", tokens=_words([("Paris", "neutral")]), **kw)[0] == "undetermined"


def test_a_profile_measures_its_signal_with_the_query_match_it_was_calibrated_with() -> None:
    """context_token_fraction of a profile calibrated before the query source finds query words as
    it did (exact whole words), so its verdict does not move; tokens and spans are normalised."""
    from types import SimpleNamespace

    from mnemoscope.audit.signals import query_match_of

    pieces = [" The", " one", "-", " or", " two", "-", "letter", " symbol", " is", " U", "."]
    q = "Which one- or two-letter symbol is used for uranium?"
    n = len(pieces)
    kw = {
        "pieces": pieces,
        "logp_with": np.log(np.where(np.arange(n) == 9, 0.99, 0.5)),  # the context raises " U"
        "logp_without": np.log(np.where(np.arange(n) == 9, 0.2, 0.5)),
        "kl": np.zeros(n),
        "top1_without": np.ones(n, dtype=bool),
        "query": q,
        "margin": LOG2,
    }
    new = attribute_tokens(**kw)
    old = attribute_tokens(**kw, query_match="exact")
    src_new = {t.text: t.source for t in new}
    src_old = {t.text: t.source for t in old}
    assert src_new[" two"] == src_new["letter"] == "query"  # "two-letter": each term is in the query
    assert src_old[" two"] == src_old["letter"] == "memory"  # exact: not whole words of the query
    assert src_new[" U"] == src_old[" U"] == "context"
    assert context_token_fraction(new) == 1.0 and context_token_fraction(old) == pytest.approx(1 / 3)
    with pytest.raises(Exception, match="query_match"):
        attribute_tokens(**kw, query_match="fuzzy")  # type: ignore[arg-type]
    assert query_match_of(SimpleNamespace(header={})) == "exact"  # calibrated before: as it was
    assert query_match_of(SimpleNamespace(header={"token_attribution": {"query_match": "normalised"}})) == (
        "normalised"
    )
