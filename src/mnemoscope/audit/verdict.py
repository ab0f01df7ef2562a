"""The one audit decision: measured signals + profile + rule -> memory flag, p_memory, source, guarantee.

Pure functions and small rule objects, no model call:

* **the empty-context rule**, written once (:func:`guarded`): with an empty context both
  paths are the same prompt, every statistic is 0 by construction, and that is *no evidence*:
  no rule flags it (the RePCS block's ``memorized``, CRM's ``anomaly_flag`` and the memory flag
  all go through it) and its source is ``undetermined``;
* **rules** (:data:`RULES`): each owns its flag and the guarantee it states:
  ``combined`` (default: the verdict model's conformal flag on p_memory), ``repcs`` (the RePCS
  paper: memory iff Z < tau), ``crm-anomaly`` (CRM appendix V.1's LTS rule; measured weak,
  kept for reproduction, see docs/audit.md);
* :func:`decide_source`: ``context``, ``memory``, ``mixed`` or ``undetermined``, with a sentence
  (``mixed`` needs a content word from memory the context does not support next to a
  context-supported one: :func:`source_evidence`);
* :func:`decide`: all of the above for one :class:`~mnemoscope.audit.signals.Measured`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from mnemoscope.detectors.crm_artifact import FittedCRM
from mnemoscope.detectors.repcs import RePCS
from mnemoscope.errors import InputError
from mnemoscope.features.attribution import (
    Span,
    TokenAttribution,
    Word,
    answer_words,
    content_word,
    query_terms,
    supported_by,
)
from mnemoscope.features.facts import AnswerFacts
from mnemoscope.trace.types import PairTrace

__all__ = [
    "CRM_LABEL",
    "EMPTY_CONTEXT_NOTE",
    "NO_FACT_NOTE",
    "RULES",
    "SOURCE_RULES",
    "AnomalyRule",
    "MemoryRule",
    "Rule",
    "Source",
    "Verdict",
    "crm_block",
    "decide",
    "decide_source",
    "decide_source_facts",
    "get_rule",
    "guarded",
    "repcs_verdict",
    "source_evidence",
    "source_rule_of",
    "unmeasurable_signals",
]

Source = Literal["context", "memory", "mixed", "unsupported", "undetermined"]
Rule = Literal["combined", "repcs", "crm-anomaly"]

EMPTY_CONTEXT_NOTE = (
    "empty context: both paths are identical, Z = 0 by construction; no evidence, never flagged"
)
NO_FACT_NOTE = (
    "the answer names nothing beyond the query (no name, number or term of its own): there is no fact "
    "to attribute, so it is neither flagged nor given a source"
)
#: how the three-way source is decided: ``grounded`` (profiles calibrated now: on the answer-bearing
#: phrases of :func:`mnemoscope.features.grounding.answer_bearing`, each traced to the passage that
#: states it, :func:`decide_source_facts`), ``facts`` (profiles calibrated before it: the same label
#: rule on content words found by surface form) or ``words`` (older profiles: every content word's
#: token source, with the same "never context for words the context does not state")
SOURCE_RULES = ("grounded", "facts", "words")
CRM_LABEL = (
    "secondary: CRM's unsupervised LTS anomaly rule (appendix V.1); weak on context reliance and at "
    "chance for membership, measured in docs/audit.md and docs/crm.md"
)


def guarded(flag: bool, identical_prompts: bool) -> bool:
    """The empty-context rule (module doc): a flag stands only when the two prompts differ."""
    return bool(flag) and not identical_prompts


# -- the anomaly rule (CRM) ------------------------------------------------------------------------


@dataclass(frozen=True)
class AnomalyRule:
    """How an LTS trajectory becomes a flag (see :mod:`mnemoscope.audit.profile`)."""

    k_sigma: float = 2.0
    rule: Literal["calibrated", "paper"] = "calibrated"
    alpha: float = 0.05
    score_threshold: float | None = None
    n_threshold: int = 0

    def decide(self, lts: np.ndarray, crm: FittedCRM) -> tuple[np.ndarray, np.ndarray, float, bool]:
        """(z ``[k]``, flagged mask ``[k]``, score, anomaly flag)."""
        z, flagged, score = crm.anomaly(lts, self.k_sigma)
        if self.rule == "paper" or self.score_threshold is None:
            flag = bool(flagged.any())
        else:
            flag = bool(score > self.score_threshold)
        return z, flagged, score, flag


# -- RePCS -----------------------------------------------------------------------------------------


def repcs_verdict(det: RePCS, trace: PairTrace, z: float | None = None) -> dict[str, Any]:
    """The RePCS decision for one trace: ``{kl, tau, memorized, n_steps, identical_prompts, note}``.

    ``tau`` is ``None`` when the calibration could not certify alpha (then nothing is flagged);
    ``memorized`` is ``Z < tau`` under the empty-context rule. ``z``: Z when already measured.
    """
    if z is None:
        z = float(det.z([trace])[0])
    tau = float(det.tau_)
    identical = bool(trace.identical_prompts)
    return {
        "kl": z,
        "tau": tau if math.isfinite(tau) else None,
        "memorized": guarded(bool(det.flag(np.array([z]))[0]), identical),
        "n_steps": int(trace.n_steps),
        "identical_prompts": identical,
        "note": EMPTY_CONTEXT_NOTE if identical else None,
    }


def crm_block(m: Any, profile: Any) -> dict[str, Any] | None:
    """CRM's secondary block of an audit (``None`` without hidden states)."""
    c = m.crm
    if c is None:
        return None
    crm = profile.crm
    flagged = np.zeros_like(c.flagged) if m.identical_prompts else c.flagged
    out: dict[str, Any] = {
        "label": CRM_LABEL,
        "anomaly_flag": guarded(c.raw_flag, m.identical_prompts),
        "anomaly_score": float(c.score),
        "lts_trajectory": [float(v) for v in c.lts],
        "lts_z": [float(v) for v in c.z],
        "layers": [int(v) for v in crm.layers],
        "flagged_layers": [int(crm.layers[j]) for j in np.flatnonzero(flagged)],
        "rule": profile.anomaly.rule,
    }
    if c.probability is not None:
        out["crm_probability"] = c.probability
    return out


# -- rules -----------------------------------------------------------------------------------------


class MemoryRule:
    """A memory rule: its raw flag on the measured signals and the guarantee it states."""

    name: str = ""
    needs_hidden_states = False

    def check(self, profile: Any, *, hidden_states: bool = True) -> None:
        """Refuse a profile (or a backend without hidden states) the rule cannot run on."""
        if self.needs_hidden_states and not hidden_states:
            raise InputError(
                f"the {self.name} rule needs hidden states, unavailable over an endpoint", field="rule"
            )

    def flag(self, m: Any, p_memory: float | None, profile: Any) -> bool:
        raise NotImplementedError

    def guarantee(self, profile: Any) -> dict[str, Any]:
        raise NotImplementedError


class CombinedRule(MemoryRule):
    """The verdict model's conformal flag on p_memory (default)."""

    name = "combined"

    def check(self, profile: Any, *, hidden_states: bool = True) -> None:
        if profile.verdict is None:
            raise InputError(
                f"the profile {profile.path} has no verdict model (it was calibrated without both labels); "
                "use rule='repcs' or recalibrate with labelled records",
                field="rule",
            )

    def flag(self, m: Any, p_memory: float | None, profile: Any) -> bool:
        return p_memory is not None and bool(profile.verdict.flag(p_memory))

    def guarantee(self, profile: Any) -> dict[str, Any]:
        v = profile.verdict
        return {
            "alpha": v.alpha,
            "n_calibration": v.n_conformal_,
            "certified": v.certified_,
            "threshold": v.threshold_,
            "statement": (
                f"a context-needed answer is flagged as memory with probability at most {v.alpha:g} "
                + (
                    "within each kind of context-needed answer ("
                    + ", ".join(f"{k}: {n}" for k, n in v.n_conformal_by_group_.items())
                    + " held-out clean calibration answers, Mondrian split-conformal)"
                    if v.certify_ == "per-kind"
                    else f"(split-conformal, {v.n_conformal_} held-out clean calibration answers)"
                )
                if v.certified_
                else f"NOT certified: {v.uncertified_reason()}; flagged when p_memory > 0.5"
            ),
        }


class RePCSRule(MemoryRule):
    """The RePCS paper's rule: memory iff Z < tau."""

    name = "repcs"

    def flag(self, m: Any, p_memory: float | None, profile: Any) -> bool:
        return m.repcs_raw_flag

    def guarantee(self, profile: Any) -> dict[str, Any]:
        rec = profile.header["repcs"]
        certified = math.isfinite(profile.repcs_tau)
        return {
            "alpha": float(rec["alpha"]),
            "n_calibration": int(rec["n"]),
            "certified": certified,
            "threshold": profile.repcs_tau if certified else None,
            "statement": "RePCS paper rule: memory when Z < tau (conformal lower quantile of clean Z)"
            if certified
            else "NOT certified: too few clean calibration queries for tau; nothing is flagged",
        }


class CRMAnomalyRule(MemoryRule):
    """CRM appendix V.1's LTS anomaly rule (secondary, weak; kept for reproduction)."""

    name = "crm-anomaly"
    needs_hidden_states = True

    def flag(self, m: Any, p_memory: float | None, profile: Any) -> bool:
        return m.crm is not None and m.crm.raw_flag

    def guarantee(self, profile: Any) -> dict[str, Any]:
        a = profile.anomaly
        return {
            "alpha": a.alpha,
            "n_calibration": a.n_threshold,
            "certified": a.score_threshold is not None and a.rule == "calibrated",
            "threshold": a.score_threshold,
            "statement": "CRM anomaly rule (secondary): the guarantee concerns anomalous LTS, not memory",
        }


_RULES: dict[str, MemoryRule] = {r.name: r for r in (CombinedRule(), RePCSRule(), CRMAnomalyRule())}
RULES: tuple[str, ...] = tuple(_RULES)


def get_rule(name: str) -> MemoryRule:
    """The rule object named ``name``.

    Raises:
        InputError: an unknown rule (naming the known ones).
    """
    if name not in _RULES:
        raise InputError(f"unknown rule {name!r}; choose one of {list(RULES)}", field="rule")
    return _RULES[name]


# -- the decision ----------------------------------------------------------------------------------


def _span_words(spans: Sequence[Span]) -> list[Word]:
    """Words of merged spans (when no tokens are given: the tokenizer's word lengths are unknown)."""
    out = []
    for s in spans:
        pos = s.start
        for w in s.text.split():
            out.append(Word(text=w, source=s.source, n_tokens=0, start=pos, end=pos + len(w)))
            pos += len(w) + 1
    return out


def source_evidence(
    words: Sequence[Word], *, query: str = "", context: str = ""
) -> tuple[list[Word], list[Word]]:
    """The item-level evidence of an answer: (context-supported content words, memory content words
    the context does not support).

    A word counts only when it is a :func:`~mnemoscope.features.attribution.content_word` (a name,
    number or term, never a query word nor a function word); a memory-attributed word also counts
    only when the context does not contain it (the model would have written it anyway, but the
    context says it too: nothing was added from memory).
    """
    q = query_terms(query)
    c = query_terms(context)
    ctx = [w for w in words if w.source == "context" and content_word(w.text, q, w.n_tokens or None)]
    mem = [
        w
        for w in words
        if w.source == "memory"
        and content_word(w.text, q, w.n_tokens or None)
        and not supported_by(w.text, c)
    ]
    return ctx, mem


def decide_source(
    *,
    identical_prompts: bool,
    answer: str,
    memory_flag: bool,
    p_memory: float | None,
    spans: Sequence[Span] = (),
    tokens: Sequence[TokenAttribution] | None = None,
    query: str = "",
    context: str = "",
    facts: AnswerFacts | None = None,
) -> tuple[Source, str]:
    """Where the answer came from, and why in words.

    With ``facts`` (the answer-bearing words, profiles whose ``source_rule`` is ``facts``) the
    decision is :func:`decide_source_facts`; without, the older rule below (kept so an older
    profile's audits keep their labels).

    * empty context (:func:`guarded`) or empty answer: ``undetermined`` (no evidence; never ``memory``);
    * ``mixed`` when the answer has a content word from memory that the context does not support
      and the query does not contain, next to a context-supported content word
      (:func:`source_evidence`; words copied from the query are never evidence);
    * otherwise flagged as memory: ``memory``; not flagged: ``context``, except when p_memory leans
      towards memory (> 0.5) under the flag threshold and no content word of the answer is
      context-supported: ``undetermined``.

    ``tokens`` (the attribution; default: words of ``spans``) give each word's token count, which
    the content-word test reads as rarity.
    """
    if not guarded(True, identical_prompts):
        return "undetermined", (
            "The context is empty, so both paths are the same prompt: there is no evidence either way "
            "and the answer is never flagged as memory."
        )
    if not answer.strip():
        return "undetermined", "The model gave an empty answer: there is nothing to attribute."
    if facts is not None:
        return decide_source_facts(facts, memory_flag=memory_flag, p_memory=p_memory)
    words = answer_words(tokens) if tokens is not None else _span_words(spans)
    ctx, mem = source_evidence(words, query=query, context=context)
    if ctx and mem:
        named = ", ".join(dict.fromkeys(w.text for w in mem[:3]))
        lead = "Mostly from memory (the flag fired)" if memory_flag else "Mixed"
        return "mixed", (
            f"{lead}: some words come from the context, others ({named}) the model added from memory "
            "without the context supporting them."
        )
    if memory_flag:
        return "memory", "Answered from memory: the model gives this answer without the context."
    # a word no context states cannot come from it, whatever its token attribution says
    c_terms = query_terms(context)
    if not any(supported_by(w.text, c_terms) for w in ctx):
        q_terms = query_terms(query)
        own = [
            w
            for w in words
            if w.source == "context"
            and content_word(w.text, q_terms, w.n_tokens or None)
            and not supported_by(w.text, c_terms)
        ]
        if own:
            return "unsupported", (
                f"Not from the context: the context does not state {_named(own)}, and no flag says the "
                "model wrote it from memory."
            )
    if p_memory is not None and p_memory > 0.5:
        if ctx:
            named = ", ".join(dict.fromkeys(w.text for w in ctx[:3]))
            return "context", (
                f"Answered from the context: what the answer names ({named}) is supported by the context; "
                "p_memory leans towards memory but stays under the calibrated threshold (no flag)."
            )
        return "undetermined", (
            "Leans towards memory, but not beyond the calibrated threshold: no flag is raised, and no "
            "word the answer names is supported by the context."
        )
    return "context", "Answered from the context: the context changed the answer."


def _named(words: Sequence[Any]) -> str:
    return ", ".join(dict.fromkeys(w.text for w in words[:3]))


def decide_source_facts(
    facts: AnswerFacts, *, memory_flag: bool, p_memory: float | None
) -> tuple[Source, str]:
    """The answer's source from its answer-bearing phrases (docs/audit.md, "How each label is decided").

    Each phrase has two facts, kept apart: *need* (would the model write it without the context:
    its closed-book answer states it, or greedy decoding without the context writes it) and
    *support* (does a passage state it). Its source (:attr:`~mnemoscope.features.facts.FactWord.grounded`)
    is ``memory`` when not needed, else ``context`` when a passage states it, else ``unsupported``.
    The answer's label, with the calibrated, certified memory flag:

    * no answer-bearing phrase: ``undetermined`` (nothing beyond the query to attribute);
    * flagged: ``memory``; ``mixed`` when a context phrase the model needed (one it would not
      write even teacher-forced without the context) stands next to a memory or unsupported one;
      ``undetermined`` when every phrase is such a needed context phrase (the flag and the phrases
      disagree: a followed knowledge conflict looks so);
    * not flagged: ``context`` only when every phrase is stated by a passage and needed;
      ``mixed`` when such a phrase stands next to a memory or unsupported one; ``unsupported``
      when no phrase is stated by a passage nor what the model writes without the context (never
      ``context``: a phrase no passage states cannot come from it); ``undetermined`` when a
      phrase is what the model writes closed-book but the flag does not fire (the evidence is
      split).
    """
    ws = facts.words
    if not ws:
        return "undetermined", (
            "The answer names nothing beyond the query (no name, number or term of its own): there is no "
            "fact to attribute either way."
        )
    mem = [w for w in ws if w.grounded == "memory"]
    ctx = [w for w in ws if w.grounded == "context"]
    uns = [w for w in ws if w.grounded == "unsupported"]

    def where(words: Sequence[Any]) -> str:
        ps = sorted({w.passage for w in words if w.passage is not None})
        if facts.n_passages < 2 or not ps:
            return "the context"
        return ("passage " if len(ps) == 1 else "passages ") + ", ".join(str(p + 1) for p in ps)

    if memory_flag:
        needed = [w for w in ctx if not w.near_greedy]
        if needed and (mem or uns):
            other = (
                f"the model would write {_named(mem)} without the context"
                if mem
                else f"no passage states {_named(uns)}"
            )
            return "mixed", (
                f"Mostly from memory (the flag fired): {other}, while {_named(needed)} comes from {where(needed)}."
            )
        if mem:
            how = (
                "its closed-book answer gives the same words"
                if any(w.in_closed_book for w in mem)
                else "greedy decoding without the context writes them"
            )
            return (
                "memory",
                f"Answered from memory: the model writes {_named(mem)} without the context too ({how}).",
            )
        if needed:
            # the certified flag and the phrases disagree: every phrase is stated by a passage and is
            # not what the model writes without the context (a followed knowledge conflict looks so)
            return "undetermined", (
                f"Split evidence: p_memory is over the certified threshold (the memory flag fired), but the "
                f"model would not write {_named(needed)} without the context, and {where(needed)} states it."
            )
        # flagged; what is left: unsupported phrases, and stated ones the model would write anyway
        # (teacher-forced without the context, near its greedy choice)
        parts = []
        if uns:
            parts.append(f"no passage states {_named(uns)}")
        if ctx:
            parts.append(
                f"{where(ctx)} states {_named(ctx)}, which the model writes near-greedily without the context too"
            )
        return "memory", "Answered from memory (the flag fired): " + "; ".join(parts) + "."
    if ctx and (mem or uns):
        parts = []
        if mem:
            parts.append(f"the model would write {_named(mem)} without it")
        if uns:
            parts.append(f"no passage states {_named(uns)} (the model added it)")
        return "mixed", f"Mixed: {_named(ctx)} comes from {where(ctx)}, while " + " and ".join(parts) + "."
    if ctx:
        return "context", (
            f"Answered from {where(ctx)}: {where(ctx)} states {_named(ctx)}, which the model would not "
            "write without the context."
        )
    if uns and not mem:
        return "unsupported", (
            f"Not from the context: no passage states {_named(uns)}, and the model would not write it "
            "without the context either (its own addition)."
        )
    lean = p_memory is not None and p_memory > 0.5
    return "undetermined", (
        f"Split evidence: the model would write {_named(mem)} without the context"
        + (f" (and no passage states {_named(uns)})" if uns else "")
        + ", but p_memory "
        + ("leans towards memory without reaching" if lean else "stays under")
        + " the calibrated threshold, so no flag is raised."
    )


@dataclass(frozen=True)
class Verdict:
    """The decision on one measured trace (what :class:`~mnemoscope.audit.requests.AuditResult` carries)."""

    source: Source
    summary: str
    memory_flag: bool
    p_memory: float | None
    guarantee: dict[str, Any]
    evidence: dict[str, Any]
    repcs: dict[str, Any]
    crm: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)


#: what measuring a verdict signal needs beyond the two paths' top-k log-probs
_SIGNAL_NEEDS = {
    "crm_probability": "hidden states",
    "lts_score": "hidden states",
    "closed_book_agreement": "a second, closed-book greedy generation",
}


def unmeasurable_signals(
    selected: Sequence[str], *, hidden_states: bool, closed_book_answer: bool
) -> dict[str, str]:
    """The verdict signals of ``selected`` a backend cannot measure, each with what it needs (the
    one check every entry point reaches through :class:`~mnemoscope.audit.auditor.Auditor`)."""
    have = {"hidden states": hidden_states, "a second, closed-book greedy generation": closed_book_answer}
    return {s: _SIGNAL_NEEDS[s] for s in selected if s in _SIGNAL_NEEDS and not have[_SIGNAL_NEEDS[s]]}


def source_rule_of(profile: Any) -> str:
    """How ``profile`` decides the three-way source (:data:`SOURCE_RULES`): what its header records,
    ``words`` for a profile calibrated before the answer-bearing words."""
    rule = (profile.header.get("source_rule") if profile is not None else None) or "words"
    return rule if rule in SOURCE_RULES else "words"


def decide(m: Any, profile: Any, rule: MemoryRule, repcs: RePCS) -> Verdict:
    """Signals + profile + rule -> the verdict (module doc). Pure: no model call."""
    notes: list[str] = []
    verdict = profile.verdict
    p_memory: float | None = None
    if verdict is not None:
        missing = [s for s in verdict.selected_ if s not in m.values]
        if missing:
            notes.append(f"p_memory not measured: signals {missing} are unavailable on this path")
        else:
            p_memory = float(verdict.predict_proba({k: [v] for k, v in m.values.items()})[0])
    rv = repcs_verdict(repcs, m.trace, z=m.repcs_z)
    memory_flag = guarded(rule.flag(m, p_memory, profile), m.identical_prompts)
    facts = m.facts if source_rule_of(profile) in ("grounded", "facts") else None
    if facts is not None and not facts.words and m.answer.strip() and not m.identical_prompts:
        memory_flag = False
        notes.append(NO_FACT_NOTE)
    source, why = decide_source(
        identical_prompts=m.identical_prompts,
        answer=m.answer,
        memory_flag=memory_flag,
        p_memory=p_memory,
        tokens=m.tokens,
        query=m.trace.query,
        context=m.trace.context,
        facts=facts,
    )
    guarantee = rule.guarantee(profile)
    cut = getattr(m.trace, "answer_cut", None)
    if cut:
        notes.append(
            f"the model went on writing after its answer: the audited answer ends at the stop sequence "
            f"{cut['stop']!r} (after {cut['token']} tokens), as an app would cut it"
        )
    if m.identical_prompts:
        notes.append("empty context: both paths are identical, every statistic is 0 by construction")
    return Verdict(
        source=source,
        summary=why,
        memory_flag=memory_flag,
        p_memory=p_memory,
        guarantee=guarantee,
        evidence={
            "repcs_z": rv["kl"],
            "tau": rv["tau"],
            "closed_book_logprob": m.values["closed_book_logprob"],
            "context_token_fraction": m.context_fraction,
            "threshold": guarantee.get("threshold"),
            "signals_used": list(verdict.selected_) if verdict is not None else [],
            "signals": {k: float(v) for k, v in m.values.items()},
            "answer_words": None if facts is None else facts.to_dict(),
            # the model's own closed-book greedy answer, when the audit generated one
            "closed_book_answer": getattr(m.trace, "answer_without", None),
        },
        repcs=rv,
        crm=crm_block(m, profile),
        notes=notes,
    )
