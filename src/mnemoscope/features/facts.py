"""The answer-bearing words of an answer and the counterfactual on them: would the model have
written this word without the context?

A long answer from a small model mixes the fact with words it copied or paraphrased from the
context ("The Mona Lisa is a portrait displayed in the Louvre in Paris. It was painted by Leonardo
da Vinci"). A signal averaged over every token follows the copying; these signals follow the
words that state the answer.

**Answer-bearing words** (:func:`fact_words`) are found from the answer, the query and the two
paths alone (a live audit has no expected answer): the answer's content words
(:func:`~mnemoscope.features.attribution.content_word`: a name, a number, a term, a word the
tokenizer splits as rare) that the query does not contain, consecutive ones joined into one phrase
("Leonardo da Vinci", "Brimwater Observatory"), decided at its first token: with teacher forcing,
the rest of a name follows from its start on both paths. A phrase the answer repeats counts once,
where it first appears. When an answer has none, its other
non-function words that are not the query's stand in (``fallback``: a lowercase common-noun answer
such as "mitochondria" split in two pieces); an answer with neither ("Yes.") has no answer-bearing
word, and its source is ``undetermined`` (:func:`mnemoscope.audit.verdict.decide_source`).

For each answer-bearing word, from the paired trace's teacher-forced steps (both paths scored on
the same answer, so step ``t`` of both is the same position):

* ``cb_rank``: the rank of the word's first token in the closed-book (no-context) distribution,
  1 = the closed-book greedy choice. Only the top-k of each step is kept (in process and over an
  endpoint alike, ``k`` = the trace's top-k, 20 by default): a token outside it has rank at least
  ``k + 1``, recorded as ``k + 1`` with ``cb_rank_bounded`` set. The signal is then a lower bound on
  the true rank, the same bound on every backend;
* ``cb_logratio``: ``sum_t log p_cb(y_t) - log p_cb(argmax_t)`` over the word's tokens (<= 0; 0 =
  greedy decoding without the context writes this word). Exact on every backend: the answer
  token's own log-prob and the top-1's are both measured;
* ``greedy_cb``: every token of the word is the closed-book top-1 (the token rule's ``memory`` test);
* ``switched``: the context switched the greedy word: at some token of the word the closed-book
  top-1 differs and the with-context top-1 is the answer's token;
* ``cb_entropy``: the closed-book entropy at the word's first token, from the top-k with the rest
  of the mass as one bucket (a lower bound on the full entropy; the same estimate on every backend);
* ``pmi``: ``log p(word | c, q) - log p(word | q)`` (chain rule over its tokens);
* ``in_closed_book``: the model's own closed-book greedy answer (one more generation, when the
  audit makes it: ``answer_without``) states the phrase (every term of it is among that answer's);
  ConflictQA's definition of a model's memory answer;
* ``source``: ``memory`` when the closed-book answer states it or, without a closed-book answer,
  when greedy decoding without the context (teacher-forced on the answer so far) writes it or a
  near-tie of it (``cb_logratio >= -log 2``, :data:`MEMORY_TOLERANCE`); otherwise ``context`` when a
  passage states it (:func:`~mnemoscope.features.grounding.states`: its terms as one contiguous run)
  and ``unsupported`` when neither (the model wrote a word no passage says and that it would not write
  without one). :attr:`FactWord.grounded` is the label rule's reading (rows stored before it say
  ``added``).

:func:`fact_signals` averages them over the answer-bearing words into the verdict's candidate
signals (:data:`FACT_SIGNALS`). Pure functions of numbers and strings: no model call.

Example:
    >>> import numpy as np
    >>> pieces = [" It", " was", " painted", " by", " Leonardo", "."]
    >>> ans = np.array([1, 2, 3, 4, 5, 6])
    >>> f = fact_words(
    ...     pieces=pieces, answer_ids=ans,
    ...     logp_with=np.log([0.9, 0.9, 0.5, 0.9, 0.9, 0.9]),
    ...     logp_without=np.log([0.9, 0.9, 0.3, 0.9, 0.8, 0.9]),
    ...     topk_ids_with=np.c_[ans, ans + 10],
    ...     topk_ids_without=np.c_[ans, ans + 10], topk_logprobs_without=np.log(np.c_[[0.9, 0.9, 0.3, 0.9, 0.8, 0.9], [0.05] * 6]),
    ...     query="Who painted the Mona Lisa?", context="The Mona Lisa hangs in the Louvre.", margin=np.log(2))
    >>> [(w.text, w.source, w.cb_rank) for w in f.words], f.fallback
    ([('Leonardo', 'memory', 1)], False)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from mnemoscope.errors import InputError
from mnemoscope.features.attribution import (
    content_word,
    query_terms,
    supported_by,
    text_terms,
    word_groups,
    wordlike,
)
from mnemoscope.features.grounding import (
    FACTS_PARTICLES,
    answer_bearing,
    join_phrases,
    parting_word,
    states,
    stating_passages,
)

__all__ = [
    "FACT_SIGNALS",
    "MEMORY_TOLERANCE",
    "NO_FACT_VALUES",
    "AnswerFacts",
    "FactSource",
    "FactWord",
    "Selection",
    "closed_book_agreement",
    "fact_signals",
    "fact_words",
    "passages_to_ablate",
    "topk_entropy",
]

#: a phrase's source: ``memory`` (the model writes it without the context), ``context`` (a passage
#: states it and the model needs the context to write it), ``unsupported`` (neither: the model's own
#: addition). ``added`` is what rows stored before the grounded verdict call ``unsupported``.
FactSource = Literal["memory", "context", "unsupported", "added"]
#: how answer-bearing words are found: ``facts`` (profiles calibrated before the grounded verdict:
#: content words by surface form, decided at the first token) or ``grounded``
#: (:func:`mnemoscope.features.grounding.answer_bearing`, decided where the phrase parts from the
#: context)
Selection = Literal["facts", "grounded"]

#: a phrase is from memory when greedy decoding without the context writes it or a near-tie of it:
#: its closed-book log-ratio to the greedy choice is at least -log 2 (at least half as likely as the
#: model's own first choice; a strict top-1 test calls "Leonardo" at p 0.30 vs 0.34 not memory)
MEMORY_TOLERANCE = math.log(2.0)
#: the verdict's candidate signals measured on the answer-bearing words (:func:`fact_signals`)
FACT_SIGNALS = ("fact_cb_logratio", "fact_cb_rank", "fact_switched", "fact_cb_entropy", "fact_pmi")
#: the values of an answer with no answer-bearing word (never flagged, whatever they give)
NO_FACT_VALUES = {
    "fact_cb_logratio": -1.0,
    "fact_cb_rank": math.log(2.0),
    "fact_switched": 0.5,
    "fact_cb_entropy": 1.0,
    "fact_pmi": 0.0,
}


@dataclass(frozen=True)
class FactWord:
    """One answer-bearing word and the counterfactual numbers behind its source (module doc)."""

    text: str
    start: int
    end: int
    n_tokens: int
    source: FactSource
    cb_rank: int
    cb_rank_bounded: bool
    cb_logratio: float
    greedy_cb: bool
    switched: bool
    cb_entropy: float
    pmi: float
    in_context: bool
    #: whether the model's own closed-book greedy answer states it (``None``: not generated)
    in_closed_book: bool | None = None
    #: the passages that state it (indices into the audit's passages; a plain context is passage 0)
    passages: tuple[int, ...] = ()
    #: the passage it is traced to: the stating passage whose removal lowers the model's belief in
    #: it most (leave-one-passage-out), the first stating one when that was not measured
    passage: int | None = None
    #: sum over the phrase's tokens of log p(y | c, q) - log p(y | c without ``passage``, q):
    #: how much the model's belief in the phrase rests on that passage (``None``: not measured)
    passage_effect: float | None = None
    #: the phrase's answer tokens ``[first, last + 1)`` and the token it is decided at
    token_start: int | None = None
    token_end: int | None = None
    decided_at: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["passages"] = list(self.passages)
        d["grounded"] = self.grounded
        d["passage_needed"] = self.passage_needed
        return d

    @property
    def grounded(self) -> Literal["memory", "context", "unsupported"]:
        """The phrase's source from its two facts, *need* and *support* (docs/audit.md): ``memory``
        when the model writes it without the context (whether or not a passage states it), else
        ``context`` when a passage states it, else ``unsupported``. Never ``context`` for a phrase
        no passage states (rows stored before support was recorded per passage use
        ``in_context``)."""
        if self.source == "memory":
            return "memory"
        return "context" if self.in_context else "unsupported"

    @property
    def passage_needed(self) -> bool | None:
        """Whether removing its passage lowers the model's belief in it by more than half
        (``passage_effect > log 2``; ``None``: not measured or not stated)."""
        if self.passage_effect is None:
            return None
        return bool(self.passage_effect > MEMORY_TOLERANCE)

    @property
    def near_greedy(self) -> bool:
        """Greedy decoding without the context, teacher-forced on the answer so far, writes this
        phrase or a near-tie of it (:data:`MEMORY_TOLERANCE`)."""
        return self.cb_logratio >= -MEMORY_TOLERANCE


@dataclass(frozen=True)
class AnswerFacts:
    """The answer-bearing words of one answer (``fallback``: no content word, so its other
    non-query, non-function words stand in; ``words`` empty: none at all) and the top-k ``k``."""

    words: tuple[FactWord, ...]
    fallback: bool
    k: int
    #: how many passages the context had (0: empty context; 1: a plain context)
    n_passages: int = 1
    #: how the words were found (:data:`Selection`)
    selection: str = "facts"

    def to_dict(self) -> dict[str, Any]:
        return {
            "words": [w.to_dict() for w in self.words],
            "fallback": self.fallback,
            "k": self.k,
            "n_passages": self.n_passages,
            "selection": self.selection,
        }

    @classmethod
    def from_dict(cls, d: Any) -> AnswerFacts:
        """Rebuild from :meth:`to_dict` (a stored audit or held-out row).

        Raises:
            InputError: a malformed record (naming the field).
        """
        try:
            names = set(FactWord.__dataclass_fields__)
            words = tuple(
                FactWord(
                    **{
                        **{k: v for k, v in w.items() if k in names},
                        "passages": tuple(int(j) for j in w.get("passages") or ()),
                    }
                )
                for w in d["words"]
            )
            return cls(
                words=words,
                fallback=bool(d.get("fallback", False)),
                k=int(d.get("k", 0)),
                n_passages=int(d.get("n_passages", 1)),
                selection=str(d.get("selection", "facts")),
            )
        except (KeyError, TypeError) as e:
            raise InputError(f"answer-bearing words record is malformed ({e})", field="facts") from e


def closed_book_agreement(facts: AnswerFacts) -> float | None:
    """Share of the answer-bearing phrases that the model's own closed-book greedy answer also states
    (``in_closed_book``; ConflictQA's definition of a memory answer); ``None`` when no closed-book
    answer was generated, ``0.5`` with no answer-bearing word.

    Example:
        >>> w = FactWord("Paris", 0, 5, 1, "memory", 1, False, 0.0, True, False, 0.5, 0.1, True, True)
        >>> closed_book_agreement(AnswerFacts((w,), False, 20))
        1.0
    """
    if not facts.words:
        return 0.5
    flags = [w.in_closed_book for w in facts.words]
    if any(f is None for f in flags):
        return None
    return float(np.mean([bool(f) for f in flags]))


def topk_entropy(logprobs: np.ndarray) -> float:
    """Entropy (nats) of a top-k distribution with the mass outside it as one more outcome: a lower
    bound on the full distribution's entropy, computable from any backend's top-k.

    Example:
        >>> round(topk_entropy(np.log([0.5, 0.5])), 4), round(topk_entropy(np.log([0.5, 0.25])), 4)
        (0.6931, 1.0397)
    """
    lp = np.asarray(logprobs, dtype=np.float64)
    lp = lp[np.isfinite(lp)]
    p = np.exp(lp)
    rest = max(0.0, 1.0 - float(p.sum()))
    h = -float(np.sum(p * lp))
    if rest > 1e-12:
        h -= rest * math.log(rest)
    return h


def fact_words(
    *,
    pieces: Sequence[str],
    answer_ids: np.ndarray,
    logp_with: np.ndarray,
    logp_without: np.ndarray,
    topk_ids_with: np.ndarray,
    topk_ids_without: np.ndarray,
    topk_logprobs_without: np.ndarray,
    query: str,
    context: str,
    margin: float,
    answer_without: str | None = None,
    passages: Sequence[str] | None = None,
    selection: Selection = "facts",
    passage_ablated: Sequence[int] = (),
    passage_logprobs: np.ndarray | None = None,
) -> AnswerFacts:
    """The answer-bearing words of one answer with their counterfactual numbers (module doc).

    Args:
        pieces: the text each answer token adds (``""`` for a special token).
        answer_ids: ``[step]`` the answer's token ids (compared with the top-k ids).
        logp_with, logp_without: ``[step]`` log p(y_t) on each path.
        topk_ids_with: ``[step k]`` the with-context top-k ids at each step (its top-1 tells
            whether the context switched the greedy word).
        topk_ids_without, topk_logprobs_without: ``[step k]`` the closed-book top-k at each step,
            most likely first.
        query, context: the inputs (query words are never answer-bearing).
        margin: the profile's token margin (``selection="facts"``: a word the context raised
            beyond it was ``context``; kept for the signals).
        answer_without: the model's closed-book greedy answer, when the audit generated one.
        passages: the context's passages (``None``: the context is one passage; an empty context
            has none). A phrase is supported when a passage states it
            (:func:`~mnemoscope.features.grounding.stating_passages`).
        selection: how answer-bearing words are found (:data:`Selection`).
        passage_ablated, passage_logprobs: the passages scored left out and ``[len(ablated) step]``
            log p(y_t | context without that passage, q) (leave-one-passage-out); with one passage,
            leaving it out is the no-context path.

    Raises:
        InputError: arrays whose shapes do not match the pieces (naming the field).
    """
    n = len(pieces)
    ids = np.asarray(answer_ids).reshape(-1)
    cols = {
        "answer_ids": ids,
        "logp_with": np.asarray(logp_with, dtype=np.float64).reshape(-1),
        "logp_without": np.asarray(logp_without, dtype=np.float64).reshape(-1),
    }
    for name, a in cols.items():
        if a.shape != (n,):
            raise InputError(f"{name} has shape {a.shape}, expected ({n},) like the token pieces", field=name)
    tops = {
        "topk_ids_with": np.asarray(topk_ids_with),
        "topk_ids_without": np.asarray(topk_ids_without),
        "topk_logprobs_without": np.asarray(topk_logprobs_without, dtype=np.float64),
    }
    k = 0
    for name, a in tops.items():
        shape = tuple(int(x) for x in a.shape)
        if len(shape) != 2 or shape[0] != n or shape[1] < 1:
            raise InputError(f"{name} has shape {shape}, expected ({n}, k)", field=name)
        k = shape[1]
    ablated = [int(j) for j in passage_ablated]
    loo = None
    if passage_logprobs is not None and ablated:
        loo = np.asarray(passage_logprobs, dtype=np.float64)
        if loo.shape != (len(ablated), n):
            raise InputError(
                f"passage_logprobs has shape {loo.shape}, expected ({len(ablated)}, {n})",
                field="passage_logprobs",
            )
    lw, lwo = cols["logp_with"], cols["logp_without"]
    iw, iwo, lpwo = tops["topk_ids_with"], tops["topk_ids_without"], tops["topk_logprobs_without"]
    qterms = query_terms(query)
    if passages is None:
        passages = [context] if context.strip() else []
    pterms = [text_terms(p) for p in passages]
    bterms = None if answer_without is None else text_terms(answer_without)
    groups = word_groups(pieces)
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in pieces])]).astype(int)

    def text_of(g: list[int]) -> str:
        return "".join(pieces[i] for i in g)

    fallback = False
    if selection == "grounded":
        chosen = answer_bearing(pieces, query, pterms, [bterms] if bterms is not None else [])
        chosen.sort(key=lambda g: g[0])
    else:
        is_content = [content_word(text_of(g), qterms, len(g)) for g in groups]
        chosen = join_phrases(groups, is_content, [text_of(g) for g in groups], FACTS_PARTICLES)
    if not chosen and selection != "grounded":
        # (the grounded selection already takes lowercase words; what it leaves out answers nothing)
        chosen = [g for g in groups if wordlike(text_of(g)) and not supported_by(text_of(g), qterms)]
        fallback = bool(chosen)
    words = []
    seen: set[frozenset[str]] = set()
    for g in chosen:
        raw = text_of(g)
        text = raw.strip()
        # a phrase the answer repeats is decided once, where it first appears: a repetition
        # copies the answer's own earlier words, which the closed-book path then sees too
        key = query_terms(text)
        if key in seen:
            continue
        seen.add(key)
        lead = len(raw) - len(raw.lstrip())
        start = int(offsets[g[0]]) + lead
        stated = stating_passages(text, pterms)
        first = next((i for i in g if pieces[i].strip()), g[0])
        if selection == "grounded":
            # decided where the phrase parts from the context ("George Orwell" against "George
            # Tolkien": at "Orwell"); a phrase a passage states, at its first token
            sub_idx = [[g[i] for i in w] for w in word_groups([pieces[i] for i in g])]
            part = parting_word(["".join(pieces[i] for i in w) for w in sub_idx], pterms)
            if part > 0:
                first = next((i for i in sub_idx[part] if pieces[i].strip()), sub_idx[part][0])
        hit = np.flatnonzero(iwo[first] == ids[first])
        rank, bounded = (int(hit[0]) + 1, False) if len(hit) else (k + 1, True)
        greedy = bool(all(iwo[i, 0] == ids[i] for i in g))
        switched = bool(any(iwo[i, 0] != ids[i] and iw[i, 0] == ids[i] for i in g))
        logratio = float(sum(min(0.0, lwo[i] - lpwo[i, 0]) for i in g))
        pmi = float(sum(lw[i] - lwo[i] for i in g))
        in_ctx = bool(stated)
        if selection == "grounded":
            in_cb = None if bterms is None else states(text_terms(text), bterms)
        else:  # as these profiles' closed_book_agreement signal was calibrated
            in_cb = None if bterms is None else supported_by(text, query_terms(answer_without or ""))
        memory = logratio >= -MEMORY_TOLERANCE if in_cb is None else in_cb
        src: FactSource = "memory" if memory else ("context" if in_ctx else "unsupported")
        # leave-one-passage-out: the effect of each stating passage on the phrase's tokens
        effects: dict[int, float] = {}
        for j in stated:
            if len(pterms) == 1:
                effects[j] = pmi  # leaving out the only passage is the no-context path
            elif loo is not None and j in ablated:
                row = loo[ablated.index(j)]
                effects[j] = float(sum(lw[i] - row[i] for i in g))
        passage = max(effects, key=lambda j: effects[j]) if effects else (stated[0] if stated else None)
        words.append(
            FactWord(
                text=text,
                start=start,
                end=start + len(text),
                n_tokens=len(g),
                source=src,
                cb_rank=rank,
                cb_rank_bounded=bounded,
                cb_logratio=logratio,
                greedy_cb=greedy,
                switched=switched,
                cb_entropy=topk_entropy(lpwo[first]),
                pmi=pmi,
                in_context=bool(in_ctx),
                in_closed_book=in_cb,
                passages=stated,
                passage=passage,
                passage_effect=None if passage is None else effects.get(passage),
                token_start=int(g[0]),
                token_end=int(g[-1]) + 1,
                decided_at=int(first),
            )
        )
    return AnswerFacts(
        words=tuple(words), fallback=fallback, k=int(k), n_passages=len(pterms), selection=selection
    )


def passages_to_ablate(facts: AnswerFacts) -> list[int]:
    """The passages to score left out (leave-one-passage-out): those that state an answer-bearing
    phrase, when the context has two or more (with one, leaving it out is the no-context path,
    already traced).

    Example:
        >>> w = FactWord("Paris", 0, 5, 1, "context", 3, False, -2.0, False, True, 2.0, 3.0, True, False, (2,))
        >>> passages_to_ablate(AnswerFacts((w,), False, 20, n_passages=4))
        [2]
    """
    if facts.n_passages < 2:
        return []
    return sorted({j for w in facts.words for j in w.passages})


def fact_signals(facts: AnswerFacts) -> dict[str, float]:
    """The answer-level candidate signals (:data:`FACT_SIGNALS`), each the mean over the
    answer-bearing words: ``fact_cb_logratio`` (high = memory), ``fact_cb_rank`` (``log`` of the
    closed-book rank, beyond the top-k counted as ``k + 1``; low = memory), ``fact_switched``
    (share the context switched; low = memory), ``fact_cb_entropy`` (low = the model was sure
    without the context) and ``fact_pmi`` (low = memory).

    An answer with no answer-bearing word has no fact to measure: the signals take fixed neutral
    values (a finite row the verdict model can score), and the audit neither flags it nor gives it a
    source (``undetermined``, :func:`mnemoscope.audit.verdict.decide_source`).
    """
    ws = facts.words
    if not ws:
        return dict(NO_FACT_VALUES)
    return {
        "fact_cb_logratio": float(np.mean([x.cb_logratio for x in ws])),
        "fact_cb_rank": float(np.mean([math.log(x.cb_rank) for x in ws])),
        "fact_switched": float(np.mean([x.switched for x in ws])),
        "fact_cb_entropy": float(np.mean([x.cb_entropy for x in ws])),
        "fact_pmi": float(np.mean([x.pmi for x in ws])),
    }
