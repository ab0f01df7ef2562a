"""The answer-bearing words (features.facts) and the three-way source decided on them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mnemoscope.audit.verdict import decide_source, decide_source_facts
from mnemoscope.errors import InputError
from mnemoscope.features.facts import (
    FACT_SIGNALS,
    MEMORY_TOLERANCE,
    NO_FACT_VALUES,
    AnswerFacts,
    FactWord,
    fact_signals,
    fact_words,
    topk_entropy,
)


def _facts(
    pieces: list[str],
    *,
    cb_top1: list[bool],
    cb_logp: list[float] | None = None,
    with_logp: list[float] | None = None,
    query: str = "",
    context: str = "",
    k: int = 3,
    margin: float = math.log(2),
    rank_out: list[bool] | None = None,
    answer_without: str | None = None,
) -> AnswerFacts:
    """A trace of a greedy answer (the with-context top-1 is always the answer's token) whose
    closed-book top-1 is the token where ``cb_top1`` says so (else another token ranks first)."""
    n = len(pieces)
    ans = np.arange(1, n + 1) * 10
    cb = np.log(np.full(n, 0.6)) if cb_logp is None else np.asarray(cb_logp, float)
    lw = np.log(np.full(n, 0.9)) if with_logp is None else np.asarray(with_logp, float)
    ids_w = np.stack([ans] + [ans + j for j in range(1, k)], 1)
    ids_wo = np.zeros((n, k), dtype=np.int64)
    lps_wo = np.zeros((n, k))
    for t in range(n):
        if cb_top1[t]:
            ids_wo[t] = [ans[t]] + [ans[t] + j for j in range(1, k)]
            lps_wo[t] = [cb[t]] + [math.log(0.01)] * (k - 1)
        elif rank_out is not None and rank_out[t]:  # the answer's token is outside the top-k
            ids_wo[t] = [ans[t] + 100 + j for j in range(k)]
            lps_wo[t] = [math.log(0.5)] + [math.log(0.05)] * (k - 1)
        else:  # second
            ids_wo[t] = [ans[t] + 100, ans[t]] + [ans[t] + 100 + j for j in range(2, k)]
            lps_wo[t] = [math.log(0.5), cb[t]] + [math.log(0.01)] * (k - 2)
    return fact_words(
        pieces=pieces,
        answer_ids=ans,
        logp_with=lw,
        logp_without=cb,
        topk_ids_with=ids_w,
        topk_ids_without=ids_wo,
        topk_logprobs_without=lps_wo,
        query=query,
        context=context,
        margin=margin,
        answer_without=answer_without,
    )


def test_answer_bearing_words_skip_query_and_function_words_and_join_names() -> None:
    pieces = [" The", " Mona", " Lisa", " was", " painted", " by", " Leonardo", " da", " Vin", "ci", "."]
    f = _facts(pieces, cb_top1=[True] * 11, query="Who painted the Mona Lisa?")
    assert [w.text for w in f.words] == ["Leonardo da Vinci"]
    w = f.words[0]
    assert w.source == "memory" and w.cb_rank == 1 and not w.cb_rank_bounded and w.greedy_cb
    assert w.cb_logratio == 0.0 and not w.switched and not f.fallback
    # the phrase's offsets spell it in the answer
    assert "".join(pieces)[w.start : w.end] == "Leonardo da Vinci"


def test_a_context_name_is_context_and_an_unsupported_one_is_added() -> None:
    pieces = [" Discovered", " at", " Brim", "water", " Observatory", " in", " Peru", "."]
    f = _facts(
        pieces,
        cb_top1=[False, True, False, True, True, True, False, True],
        cb_logp=[math.log(0.2), -0.1, math.log(1e-6), -0.1, -0.1, -0.1, math.log(0.01), -0.1],
        with_logp=[math.log(0.9), -0.1, math.log(0.9), -0.1, -0.1, -0.1, math.log(0.02), -0.1],
        query="Where was the comet discovered?",
        context="The comet was discovered at the Brimwater Observatory.",
    )
    by = {w.text: w for w in f.words}
    assert by["Brimwater Observatory"].source == "context" and by["Brimwater Observatory"].switched
    # "Peru": not the closed-book choice, in no context, raised by less than the margin
    assert by["Peru"].source == "unsupported" and not by["Peru"].in_context
    src, why = decide_source_facts(f, memory_flag=False, p_memory=0.2)
    assert src == "mixed" and "Peru" in why


def test_memory_takes_a_near_tie_of_the_greedy_choice_not_a_distant_second() -> None:
    near = _facts([" Leonardo"], cb_top1=[False], cb_logp=[math.log(0.45)])  # top-1 has 0.5
    assert near.words[0].cb_rank == 2 and near.words[0].cb_logratio >= -MEMORY_TOLERANCE
    assert near.words[0].source == "memory" and near.words[0].switched
    far = _facts([" Glasgow"], cb_top1=[False], cb_logp=[math.log(0.05)], context="Glasgow is the capital.")
    assert far.words[0].source == "context" and far.words[0].cb_logratio == pytest.approx(math.log(0.1))


def test_a_rank_outside_the_top_k_is_bounded_at_k_plus_one() -> None:
    f = _facts([" Zorblat"], cb_top1=[False], cb_logp=[math.log(1e-5)], rank_out=[True], k=4)
    w = f.words[0]
    assert w.cb_rank == 5 and w.cb_rank_bounded
    s = fact_signals(f)
    assert s["fact_cb_rank"] == pytest.approx(math.log(5)) and s["fact_switched"] == 1.0


def test_no_content_word_beyond_the_query_is_undetermined_and_never_flagged() -> None:
    f = _facts([" Yes", "."], cb_top1=[True, True], query="Is Glasgow the capital of Scotland?")
    assert f.words == () and not f.fallback
    assert fact_signals(f) == NO_FACT_VALUES and set(NO_FACT_VALUES) == set(FACT_SIGNALS)
    src, why = decide_source(identical_prompts=False, answer="Yes.", memory_flag=True, p_memory=0.99, facts=f)
    assert src == "undetermined" and "nothing beyond the query" in why


def test_a_lowercase_answer_word_stands_in_when_no_content_word() -> None:
    f = _facts([" the", " mito", "chondria"], cb_top1=[True, True, True], query="Which organelle?")
    # "mitochondria" in 2 pieces is not rare by the content-word test: the fallback takes it
    assert [w.text for w in f.words] == ["mitochondria"] and f.fallback


def test_topk_entropy_is_a_lower_bound_with_the_tail_as_one_outcome() -> None:
    assert topk_entropy(np.log([1.0])) == pytest.approx(0.0)
    p = np.array([0.5, 0.3])
    assert topk_entropy(np.log(p)) == pytest.approx(-(p * np.log(p)).sum() - 0.2 * math.log(0.2))
    full = np.array([0.5, 0.3, 0.1, 0.1])
    assert topk_entropy(np.log(full[:2])) <= -(full * np.log(full)).sum() + 1e-12


@pytest.mark.parametrize(
    ("sources", "flag", "p", "expected"),
    [
        (["memory"], True, 0.99, "memory"),
        (["memory", "context"], True, 0.99, "mixed"),
        # a context phrase the model would write anyway: the context paraphrased around the fact
        (["memory", "context-paraphrased"], True, 0.99, "memory"),
        (["context"], False, 0.1, "context"),
        (["context", "memory"], False, 0.3, "mixed"),
        (["context", "added"], False, 0.3, "mixed"),
        (["context", "unsupported"], True, 0.99, "mixed"),
        # a phrase no passage states is never context, whatever else holds
        (["added"], False, 0.3, "unsupported"),
        (["unsupported"], False, 0.1, "unsupported"),
        (["memory", "unsupported"], False, 0.3, "undetermined"),
        (["unsupported"], True, 0.99, "memory"),
        # the flag fired, but the only phrase is stated by the context and needed: split evidence
        (["context"], True, 0.9, "undetermined"),
        (["memory"], False, 0.7, "undetermined"),
        (["memory"], False, 0.2, "undetermined"),
        ([], False, 0.5, "undetermined"),
    ],
)
def test_three_way_source_follows_the_answer_bearing_words(
    sources: list[str], flag: bool, p: float, expected: str
) -> None:
    words = tuple(
        FactWord(
            text=f"W{i}",
            start=0,
            end=2,
            n_tokens=1,
            source=s.split("-")[0],  # type: ignore[arg-type]
            cb_rank=1,
            cb_rank_bounded=False,
            cb_logratio=0.0 if s in ("memory", "context-paraphrased") else -5.0,
            greedy_cb=s == "memory",
            switched=s != "memory",
            cb_entropy=1.0,
            pmi=0.0,
            in_context=s.startswith("context"),
        )
        for i, s in enumerate(sources)
    )
    src, why = decide_source_facts(
        AnswerFacts(words=words, fallback=False, k=20), memory_flag=flag, p_memory=p
    )
    assert src == expected and why
    if src == "context":
        assert all(w.in_context for w in words)


def test_answer_facts_round_trip_and_malformed_record() -> None:
    f = _facts([" Paris"], cb_top1=[True])
    assert AnswerFacts.from_dict(f.to_dict()) == f
    with pytest.raises(InputError) as e:
        AnswerFacts.from_dict({"words": [{"text": "x"}]})
    assert e.value.field == "facts"


def test_bad_shapes_are_refused_naming_the_field() -> None:
    with pytest.raises(InputError) as e:
        fact_words(
            pieces=[" a", " b"],
            answer_ids=np.array([1, 2]),
            logp_with=np.zeros(2),
            logp_without=np.zeros(3),
            topk_ids_with=np.zeros((2, 2), int),
            topk_ids_without=np.zeros((2, 2), int),
            topk_logprobs_without=np.zeros((2, 2)),
            query="",
            context="",
            margin=1.0,
        )
    assert e.value.field == "logp_without"


def test_a_repeated_phrase_is_decided_once_where_it_first_appears() -> None:
    # "8" is first written against the closed-book choice (the context's), then repeated: the
    # repetition copies the answer itself and the closed-book path sees it in the prefix
    f = _facts(
        [" The", " answer", " is", " 8", ".", " An", " insect", " has", " 8", " legs", "."],
        cb_top1=[True, True, True, False, True, True, True, True, True, True, True],
        cb_logp=[-0.1, -0.1, -0.1, math.log(0.05), -0.1, -0.1, -0.1, -0.1, -0.1, -0.1, -0.1],
        query="How many legs does an insect have?",
        context="An insect has 8 legs.",
    )
    assert [w.text for w in f.words] == ["8"] and f.words[0].source == "context"


def test_the_closed_book_answer_decides_memory_when_it_was_generated() -> None:
    from mnemoscope.features.facts import closed_book_agreement

    pieces = [" A", " baby", " sheep", " is", " called", " a", " Calf", "."]
    kw: dict = {
        "cb_top1": [True] * 8,
        "query": "What is a baby sheep called?",
        "context": "A baby sheep is a Calf.",
    }
    # teacher-forced, the closed-book path follows the answer so far to "Calf" ...
    assert _facts(pieces, **kw).words[0].source == "memory"
    assert closed_book_agreement(_facts(pieces, **kw)) is None  # no closed-book answer generated
    # ... but the model's own closed-book answer says something else: the context gave "Calf"
    f = _facts(pieces, **kw, answer_without="A baby sheep is called a lamb.")
    assert f.words[0].in_closed_book is False and f.words[0].source == "context"
    assert closed_book_agreement(f) == 0.0
    g = _facts(pieces, **kw, answer_without="It is a Calf.")
    assert g.words[0].source == "memory" and closed_book_agreement(g) == 1.0


def test_rows_stored_before_the_grounded_verdict_still_load_and_are_never_context_unless_stated() -> None:
    old = {
        "words": [
            {
                "text": "Orwell",
                "start": 7,
                "end": 13,
                "n_tokens": 2,
                "source": "context",  # the old rule: raised by the context beyond the margin
                "cb_rank": 5,
                "cb_rank_bounded": False,
                "cb_logratio": -3.0,
                "greedy_cb": False,
                "switched": True,
                "cb_entropy": 1.0,
                "pmi": 4.0,
                "in_context": False,
                "in_closed_book": False,
            },
            {**dict.fromkeys(("start", "end", "n_tokens", "cb_rank"), 1), "text": "Paris", "source": "added"}
            | {
                "cb_rank_bounded": False,
                "cb_logratio": -3.0,
                "greedy_cb": False,
                "switched": False,
                "cb_entropy": 1.0,
                "pmi": 0.1,
                "in_context": False,
            },
        ],
        "fallback": False,
        "k": 20,
    }
    f = AnswerFacts.from_dict(old)
    assert [w.grounded for w in f.words] == ["unsupported", "unsupported"]
    assert f.n_passages == 1 and f.selection == "facts" and f.words[0].passages == ()
    src, why = decide_source_facts(f, memory_flag=False, p_memory=0.2)
    assert src == "unsupported" and "Orwell" in why
    # a new row round-trips, derived fields included in the JSON and ignored on load
    d = f.to_dict()
    assert d["words"][0]["grounded"] == "unsupported" and AnswerFacts.from_dict(d) == f


def _grounded(
    pieces: list[str], query: str, passages: list[str], answer_without: str | None = None
) -> AnswerFacts:
    n = len(pieces)
    ans = np.arange(1, n + 1) * 10
    return fact_words(
        pieces=pieces,
        answer_ids=ans,
        logp_with=np.log(np.full(n, 0.9)),
        logp_without=np.log(np.full(n, 0.3)),
        topk_ids_with=np.stack([ans, ans + 1], 1),
        topk_ids_without=np.stack([ans + 1, ans], 1),
        topk_logprobs_without=np.log(np.stack([np.full(n, 0.6), np.full(n, 0.3)], 1)),
        query=query,
        context="\n\n".join(passages),
        margin=math.log(2),
        passages=passages,
        selection="grounded",
        answer_without=answer_without,
    )


def test_a_name_is_decided_where_it_parts_from_the_context_wherever_it_stands() -> None:
    f = _grounded([" It", " was", " George", " Orwell", "."], "Who wrote 1984?", ["George Tolkien wrote it."])
    (w,) = f.words
    assert w.text == "George Orwell" and w.grounded == "unsupported" and w.passages == ()
    assert w.decided_at == 3  # "Orwell", not "George"


@pytest.mark.parametrize(
    ("pieces", "query", "expected"),
    [
        ([" J", ".", " K", ".", " Rowling", " wrote", " it", "."], "Who wrote it?", ["J. K. Rowling"]),
        ([" John", " F", ".", " Kennedy", " was", " elected", "."], "Who was elected?", ["John F. Kennedy"]),
        ([" In", " 1066", " the", " Normans", " won", "."], "Who won?", ["1066", "Normans"]),
        ([" I", " do", " not", " know", "."], "Who won?", []),
        ([" I", " cannot", " answer", " that", "."], "Who won?", []),
        ([" About", " 1", ",", "000", " people", "."], "Did 1000 people attend?", []),
    ],
)
def test_answer_bearing_phrases_of_names_numbers_and_non_answers(
    pieces: list[str], query: str, expected: list[str]
) -> None:
    f = _grounded(pieces, query, ["Nothing relevant."])
    assert [w.text for w in f.words] == expected


def test_two_numbers_side_by_side_stay_two_terms_and_a_grouped_number_is_one() -> None:
    from mnemoscope.features.attribution import text_terms

    assert text_terms("In 1990 300 workers") == ["in", "1990", "300", "worker"]
    assert text_terms("1,000") == text_terms("1000") == text_terms("1\u202f000") == ["1000"]
