"""From one paired trace to the numbers a verdict is made of (no model call, no decision).

:func:`measure` computes, once per audit: RePCS's Z, the closed-book log-probability of the
answer, the token attribution and the share of context-supported words, and (with hidden
states) CRM's LTS trajectory and its anomaly score, and CRM's classifier probability when asked.
:func:`answer_pieces` gives the text each answer token adds, in one pass over the tokens.
The decision on these numbers is :func:`mnemoscope.audit.verdict.decide`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mnemoscope.audit.verdict import AnomalyRule
from mnemoscope.detectors.crm_artifact import FittedCRM
from mnemoscope.detectors.repcs import RePCS
from mnemoscope.features.attribution import (
    QUERY_MATCH,
    QueryMatch,
    Span,
    TokenAttribution,
    attribute_tokens,
    context_token_fraction,
    merge_spans,
)
from mnemoscope.features.facts import AnswerFacts, Selection, closed_book_agreement, fact_signals, fact_words
from mnemoscope.trace.types import PairTrace

__all__ = [
    "CRMMeasure",
    "Measured",
    "answer_facts",
    "answer_pieces",
    "measure",
    "query_match_of",
    "selection_of",
    "trace_signals",
]


def answer_pieces(tokenizer: Any, answer_ids: Sequence[int] | np.ndarray) -> list[str]:
    """The text each answer token adds to the decoded answer (special tokens add ``""``).

    Incremental decoding in O(T): each step decodes only the window since the last complete
    piece (``ids[prefix:t + 1]`` against ``ids[prefix:read]``), which keeps sentencepiece spacing
    right; a byte-level piece that leaves a character incomplete adds ``""`` and the token that
    completes it adds the whole character. ``"".join(pieces)`` is the answer text every offset
    refers to (it equals the decoded answer; for byte sequences that never form valid UTF-8 it
    falls back to decoding token by token).
    """
    ids = [int(i) for i in answer_ids]
    full = tokenizer.decode(ids, skip_special_tokens=True)
    pieces: list[str] = []
    prefix = read = 0  # ids[prefix:read] is the last committed window
    prefix_text = ""
    done: list[str] = []
    for t in range(len(ids)):
        cur = tokenizer.decode(ids[prefix : t + 1], skip_special_tokens=True)
        if cur.startswith(prefix_text) and not cur.endswith("\ufffd"):
            piece = cur[len(prefix_text) :]
            pieces.append(piece)
            done.append(piece)
            prefix, read = read, t + 1
            prefix_text = tokenizer.decode(ids[prefix:read], skip_special_tokens=True)
        else:  # an incomplete character (or a clean-up that rewrote the prefix): wait
            pieces.append("")
    committed = "".join(done)
    if pieces and full.startswith(committed):
        pieces[-1] += full[len(committed) :]
    if "".join(pieces) != full:
        pieces = [tokenizer.decode([i], skip_special_tokens=True) for i in ids]
    return pieces


@dataclass(frozen=True)
class CRMMeasure:
    """CRM's secondary numbers of one trace: the LTS trajectory, its per-layer z, the flagged
    layers and the anomaly score, and the anomaly rule's raw flag (before the empty-context rule)."""

    lts: np.ndarray
    z: np.ndarray
    flagged: np.ndarray
    score: float
    raw_flag: bool
    probability: float | None = None


@dataclass(frozen=True)
class Measured:
    """Everything measured on one trace (module doc); ``values`` are the verdict model's inputs."""

    trace: PairTrace
    answer: str
    values: dict[str, float]
    context_fraction: float | None
    tokens: list[TokenAttribution]
    spans: list[Span]
    repcs_z: float
    repcs_raw_flag: bool
    crm: CRMMeasure | None = None
    notes: list[str] = field(default_factory=list)
    facts: AnswerFacts | None = None

    @property
    def identical_prompts(self) -> bool:
        return bool(self.trace.identical_prompts)


def query_match_of(profile: Any) -> QueryMatch:
    """How ``profile`` was calibrated to find query words in ``context_token_fraction``: what its
    ``token_attribution.query_match`` records, ``"exact"`` for a profile calibrated before the
    ``query`` source (the signal is measured as the verdict model was fitted on it)."""
    rec = (profile.header.get("token_attribution") or {}) if profile is not None else {}
    return "normalised" if rec.get("query_match") == "normalised" else "exact"


def selection_of(profile: Any) -> Selection:
    """How ``profile``'s answer-bearing words are found (:data:`~mnemoscope.features.facts.Selection`):
    ``grounded`` for a profile calibrated with the grounded verdict (``source_rule: grounded``),
    ``facts`` for one calibrated before it (its signals are measured as it was fitted on them)."""
    rule = (profile.header.get("source_rule") if profile is not None else None) or "words"
    return "grounded" if rule == "grounded" else "facts"


def measure(
    trace: PairTrace,
    pieces: Sequence[str],
    *,
    margin: float,
    repcs: RePCS,
    crm: FittedCRM | None = None,
    anomaly: AnomalyRule | None = None,
    crm_probability: bool = False,
    query_match: QueryMatch = QUERY_MATCH,
    selection: Selection = "facts",
) -> Measured:
    """Measure one trace (module doc).

    The token attribution (``tokens``, ``spans``) always finds query words after normalisation
    (:func:`~mnemoscope.features.attribution.supported_by`); ``query_match`` says how the signal
    ``context_token_fraction`` does (:func:`query_match_of` the profile: a profile calibrated with
    exact word matching is measured that way, so its verdict is what it was calibrated to give).

    ``lts_score`` (and the CRM block) is present only when the trace has hidden states and
    ``crm`` + ``anomaly`` are given; ``crm_probability`` also needs a CRM classifier.
    ``context_token_fraction`` is 0.5 (uninformative) when no word of the answer is attributed
    either way (``context_fraction`` keeps ``None`` then).
    """
    top1 = np.asarray(trace.topk_ids_without[:, 0] == trace.answer_ids, dtype=bool)
    tokens = attribute_tokens(
        pieces=pieces,
        logp_with=trace.logprob_answer_with,
        logp_without=trace.logprob_answer_without,
        kl=trace.kl_steps,
        top1_without=top1,
        query=trace.query,
        margin=margin,
    )
    frac = context_token_fraction(tokens)
    if query_match != "normalised":
        frac = context_token_fraction(
            attribute_tokens(
                pieces=pieces,
                logp_with=trace.logprob_answer_with,
                logp_without=trace.logprob_answer_without,
                kl=trace.kl_steps,
                top1_without=top1,
                query=trace.query,
                margin=margin,
                query_match=query_match,
            )
        )
    z = float(repcs.z([trace])[0])
    facts = answer_facts(trace, pieces, margin=margin, selection=selection)
    values = {
        "repcs_z": z,
        "closed_book_logprob": float(np.mean(trace.logprob_answer_without)) if trace.n_steps else 0.0,
        "context_token_fraction": 0.5 if frac is None else float(frac),
        **fact_signals(facts),
    }
    agree = closed_book_agreement(facts)  # when the closed-book greedy answer was generated
    if agree is not None:
        values["closed_book_agreement"] = agree
    crm_m: CRMMeasure | None = None
    if crm is not None and anomaly is not None and trace.h_with is not None and trace.h_without is not None:
        lts = crm.lts(trace.displacement)
        lz, flagged, score, flag = anomaly.decide(lts, crm)
        values["lts_score"] = float(score)
        prob = None
        if crm_probability:
            from mnemoscope.features.crm import crm_data_from_pairs

            prob = float(crm.predict_proba(crm_data_from_pairs([trace]))[0])
            values["crm_probability"] = prob
        crm_m = CRMMeasure(
            lts=lts, z=lz, flagged=flagged, score=float(score), raw_flag=flag, probability=prob
        )
    return Measured(
        trace=trace,
        answer="".join(pieces),
        values=values,
        context_fraction=frac,
        tokens=tokens,
        spans=merge_spans(tokens),
        repcs_z=z,
        repcs_raw_flag=bool(repcs.flag(np.array([z]))[0]),
        crm=crm_m,
        facts=facts,
    )


def answer_facts(
    trace: PairTrace, pieces: Sequence[str], *, margin: float, selection: Selection = "facts"
) -> AnswerFacts:
    """The answer-bearing words of a trace's answer (:func:`~mnemoscope.features.facts.fact_words`),
    each traced to the trace's passages (``trace.passages``; a plain context is one passage) with
    the leave-one-passage-out log-probs the backend measured."""
    return fact_words(
        pieces=pieces,
        answer_ids=trace.answer_ids,
        logp_with=trace.logprob_answer_with,
        logp_without=trace.logprob_answer_without,
        topk_ids_with=trace.topk_ids_with,
        topk_ids_without=trace.topk_ids_without,
        topk_logprobs_without=trace.topk_logprobs_without,
        query=trace.query,
        context=trace.context,
        margin=margin,
        answer_without=trace.answer_without,
        passages=getattr(trace, "passages", None),
        selection=selection,
        passage_ablated=getattr(trace, "passage_ablated", ()),
        passage_logprobs=getattr(trace, "passage_logprobs", None),
    )


def trace_signals(
    trace: PairTrace,
    pieces: Sequence[str],
    *,
    margin: float,
    repcs: RePCS,
    profile: Any = None,
    selection: Selection | None = None,
) -> tuple[dict[str, float], list[TokenAttribution]]:
    """The verdict model's signals and the token attribution of one trace (:func:`measure`;
    with a ``profile``, ``lts_score`` from its CRM when the trace has hidden states, and the
    answer-bearing words found as the profile was calibrated; without one, as a calibration
    finds them now: ``grounded``)."""
    m = measure(
        trace,
        pieces,
        margin=margin,
        repcs=repcs,
        crm=None if profile is None else profile.crm,
        anomaly=None if profile is None else profile.anomaly,
        query_match=QUERY_MATCH if profile is None else query_match_of(profile),
        selection=selection or ("grounded" if profile is None else selection_of(profile)),
    )
    return m.values, m.tokens
