"""Token-level attribution: which words of an answer came from the context, which from memory.

For every answer token y_t of a paired trace the two paths give ``log p(y_t | c, q, y_<t)``
(with the context) and ``log p(y_t | q, y_<t)`` (query alone). Their difference is the
pointwise context information of the token::

    pmi_t = log p(y_t | c, q, y_<t) - log p(y_t | q, y_<t)

Tokens are grouped into words (a word starts at a piece with leading whitespace or at
punctuation), and a word's PMI is the sum of its tokens' PMIs, i.e. ``log p(word | c, q) -
log p(word | q)`` by the chain rule, so a rare name split into five sub-word pieces is judged
as one unit. Each word is then

* **neutral** when it carries no content: whitespace, punctuation or a function word;
* **query** when the query itself contains it (restating the question is neither memory nor
  context): compared after normalisation (:func:`query_terms`: case, punctuation and hyphens,
  a possessive ``'s``, simple English inflection), so "Hask-Delano", "sand-skippers" or
  "discovered" in the answer match "Hask-Delano", "sand-skipper" or "discover" in the query;
* **context** when the context raised its probability by more than the calibrated margin
  (``word_pmi > margin``);
* **memory** when the query alone already predicts it: every token of the word is the top-1
  token of the no-context distribution at its step (greedy decoding without the context
  would write the same word) and the context did not raise it beyond the margin;
* **neutral** otherwise (neither path is confident: no evidence either way).

The margin is calibrated on answers known to come from memory
(:func:`calibrate_margin`): the ``quantile`` of their content words' PMI, and never below
``log 2`` (the context must at least double a word's probability). Tokens inherit their
word's source; spans merge consecutive words of the same source, with character offsets into
the answer text.

Pure functions of numbers and strings: the pipeline decodes the token pieces.

Example:
    >>> toks = attribute_tokens(
    ...     pieces=[" The", " river", " is", " Zorblat", "."],
    ...     logp_with=np.log([0.9, 0.8, 0.9, 0.7, 0.9]),
    ...     logp_without=np.log([0.9, 0.7, 0.9, 0.001, 0.9]),
    ...     kl=np.zeros(5),
    ...     top1_without=np.array([True, True, True, False, True]),
    ...     query="Which river runs through Quenmar?",
    ...     margin=np.log(2),
    ... )
    >>> [(t.text, t.source) for t in toks]
    [(' The', 'neutral'), (' river', 'query'), (' is', 'neutral'), (' Zorblat', 'context'), ('.', 'neutral')]
    >>> [(s.text, s.source) for s in merge_spans(toks) if s.source != "neutral"]
    [('river', 'query'), ('Zorblat', 'context')]
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from mnemoscope.errors import InputError

__all__ = [
    "DISCOURSE_WORDS",
    "MIN_MARGIN",
    "QUERY_MATCH",
    "QueryMatch",
    "Span",
    "TokenAttribution",
    "TokenSource",
    "Word",
    "answer_words",
    "attribute_tokens",
    "calibrate_margin",
    "content_word",
    "content_word_pmis",
    "context_token_fraction",
    "merge_spans",
    "query_terms",
    "salient",
    "supported_by",
    "text_terms",
    "word_groups",
    "wordlike",
]

TokenSource = Literal["context", "memory", "neutral", "query"]
#: how a word is found in the query: ``"normalised"`` (:func:`supported_by`: case, punctuation,
#: hyphens, possessive, inflection) or ``"exact"`` (the lowercased whole word, as profiles calibrated
#: before the ``query`` source measured ``context_token_fraction``)
QueryMatch = Literal["normalised", "exact"]
#: what a profile calibrated now records (``profile.json``: ``token_attribution.query_match``)
QUERY_MATCH: QueryMatch = "normalised"
MIN_MARGIN = math.log(2.0)

# Closed-class English words: they carry grammar, not facts.
_FUNCTION_WORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "nor",
        "so",
        "yet",
        "of",
        "in",
        "on",
        "at",
        "to",
        "for",
        "from",
        "by",
        "with",
        "about",
        "as",
        "into",
        "onto",
        "upon",
        "over",
        "under",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "am",
        "do",
        "does",
        "did",
        "has",
        "have",
        "had",
        "having",
        "will",
        "would",
        "shall",
        "should",
        "can",
        "could",
        "may",
        "might",
        "must",
        "it",
        "its",
        "it's",
        "this",
        "that",
        "these",
        "those",
        "there",
        "here",
        "which",
        "who",
        "whom",
        "whose",
        "what",
        "when",
        "where",
        "why",
        "how",
        "i",
        "you",
        "he",
        "she",
        "we",
        "they",
        "me",
        "him",
        "her",
        "us",
        "them",
        "my",
        "your",
        "his",
        "our",
        "their",
        "mine",
        "yours",
        "ours",
        "theirs",
        "not",
        "no",
        "yes",
        "than",
        "then",
        "also",
        "very",
        "too",
        "just",
        "only",
        "both",
        "each",
        "all",
        "any",
        "some",
        "such",
        "own",
        "same",
        "other",
        "another",
        "more",
        "most",
        "answer",
        "answers",
    ]
)
_DISCOURSE_WORDS = frozenset(
    [
        "however",
        "therefore",
        "thus",
        "hence",
        "moreover",
        "furthermore",
        "additionally",
        "indeed",
        "overall",
        "finally",
        "first",
        "second",
        "third",
        "sure",
        "certainly",
        "yes",
        "no",
        "note",
        "according",
        "based",
    ]
)
#: words that organise an answer ("however", "according", "note"); never a fact
DISCOURSE_WORDS = _DISCOURSE_WORDS
_WORD_RE = re.compile(r"[\w'’-]+", re.UNICODE)
# the terms of a word: runs of letters or digits (hyphens, apostrophes, punctuation separate them)
_TERM_RE = re.compile(r"[^\W_]+", re.UNICODE)
_POSSESSIVE_RE = re.compile(r"['’]s\b", re.IGNORECASE)
#: a lowercase word split into this many tokens or more is rare for the model's tokenizer (a term)
RARE_WORD_TOKENS = 3


@dataclass(frozen=True)
class TokenAttribution:
    """One answer token: its text, where it came from, and the numbers behind the call."""

    text: str
    source: TokenSource
    pmi: float
    kl: float
    logp_with: float
    logp_without: float
    word_pmi: float
    start: int
    end: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Span:
    """Consecutive words of one source, with character offsets into the answer."""

    text: str
    source: TokenSource
    start: int
    end: int
    pmi: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _is_punct(s: str) -> bool:
    return bool(s) and all(unicodedata.category(ch)[0] in "PSZ" or ch.isspace() for ch in s)


def _norm(word: str) -> str:
    return word.strip().strip("'’-").lower()


def _stem(term: str) -> str:
    """Simple English inflection off a casefolded term: plural -s/-es/-ies, -ed, -ing, a final -e
    ("legs" -> "leg", "discovered" -> "discover", "located"/"locate" -> "locat"). Other scripts
    and short terms are kept as they are."""
    if len(term) <= 3 or not term.isascii() or not term.isalpha():
        return term
    t = term
    if t.endswith("ies") and len(t) > 4:
        t = t[:-3] + "y"
    elif t.endswith("ing") and len(t) > 5:
        t = t[:-3]
    elif (t.endswith("ed") and len(t) > 4) or t.endswith(("sses", "xes", "ches", "shes", "zes")):
        t = t[:-2]
    elif t.endswith("s") and not t.endswith(("ss", "us", "is")):
        t = t[:-1]
    if t.endswith("e") and len(t) > 4:
        t = t[:-1]
    return t


def _terms(text: str) -> list[str]:
    """The normalised terms of a text: NFKC, casefolded, a possessive ``'s`` dropped, split at
    everything that is not a letter or a digit, each term stemmed (:func:`_stem`)."""
    text = _POSSESSIVE_RE.sub("", unicodedata.normalize("NFKC", text))
    return [_stem(t.casefold()) for t in _TERM_RE.findall(text)]


# a digit group separator: a comma, a thin or no-break space, an apostrophe (not a plain space:
# "in 1990 300 workers" is two numbers)
_DIGIT_GROUP_RE = re.compile(r"(?<=\d)[,\u202f\u00a0'’](?=\d{3}(?!\d))")


def text_terms(text: str) -> list[str]:
    """The normalised terms of a text in order (:func:`query_terms` keeps them as a set): NFKC,
    casefolded, possessive dropped, stemmed, and a number's digit grouping removed ("1,000",
    "1 000" and "1000" are one term), so that two texts that differ only in case, punctuation or a
    number's format give the same terms.

    Example:
        >>> text_terms("George Orwell's 1,984 Novels")
        ['georg', 'orwell', '1984', 'novel']
    """
    return _terms(_DIGIT_GROUP_RE.sub("", text))  # before NFKC, which turns a thin space into a blank


def query_terms(query: str) -> frozenset[str]:
    """The normalised terms of a query (or of any text a word is looked up in: a context).

    Example:
        >>> t = query_terms("How many legs does the Quellan sand-skipper have?")
        >>> sorted(x for x in t if x.startswith(("leg", "sand", "skip", "quel")))
        ['leg', 'quellan', 'sand', 'skipper']
    """
    return frozenset(_terms(query))


def supported_by(word: str, terms: frozenset[str] | set[str]) -> bool:
    """Whether every term of ``word`` is among ``terms`` (:func:`query_terms` of a query or a
    context): "Hask-Delano" is in "When was the comet Hask-Delano discovered?", so is "skippers"
    in "... the sand-skipper ...". A word without letters or digits is never supported.

    Example:
        >>> q = query_terms("When was the comet Hask-Delano discovered?")
        >>> supported_by("Hask", q), supported_by("Delano's", q), supported_by("Discovery", q)
        (True, True, False)
    """
    ts = _terms(word)
    return bool(ts) and all(t in terms for t in ts)


def word_groups(pieces: Sequence[str]) -> list[list[int]]:
    """The token indices of each word of an answer (the grouping every attribution uses: a word
    starts at leading whitespace or punctuation)."""
    groups: list[list[int]] = []
    for i, p in enumerate(pieces):
        starts = (
            not groups
            or p[:1].isspace()
            or _is_punct(p)
            or _is_punct(pieces[groups[-1][-1]])
            or not p.strip()
        )
        if starts:
            groups.append([i])
        else:
            groups[-1].append(i)
    return groups


def wordlike(word: str) -> bool:
    """A word that may carry content at the token level: letters or digits, not a function word."""
    w = _norm(word)
    if not w or _is_punct(word.strip()) or w in _FUNCTION_WORDS:
        return False
    return any(ch.isalnum() for ch in w)


def _content(word: str, qterms: frozenset[str]) -> bool:
    """Token-level: a word that can be attributed to the context or to memory (not a query word)."""
    return wordlike(word) and not supported_by(word, qterms)


def attribute_tokens(
    *,
    pieces: Sequence[str],
    logp_with: np.ndarray,
    logp_without: np.ndarray,
    kl: np.ndarray,
    top1_without: np.ndarray,
    query: str,
    margin: float,
    query_match: QueryMatch = QUERY_MATCH,
) -> list[TokenAttribution]:
    """Label every answer token context / memory / query / neutral (module doc).

    Args:
        pieces: the text each answer token adds to the decoded answer (``""`` for a special
            token such as EOS); ``"".join(pieces)`` is the answer text.
        logp_with, logp_without: ``[step]`` log p(y_t) on the with- and no-context paths.
        kl: ``[step]`` KL(p_with || p_without) at each step (reported, not used for the call).
        top1_without: ``[step]`` whether y_t is the no-context path's most likely token.
        query: the query (words it contains are marked ``query`` in the answer).
        margin: the calibrated PMI margin in nats (``>= log 2`` recommended).
        query_match: ``"normalised"`` (default) or ``"exact"``: the whole lowercased word must be a
            query word (:data:`QueryMatch`; kept so a profile measures ``context_token_fraction``
            the way it was calibrated).
    """
    n = len(pieces)
    arrays = {
        "logp_with": np.asarray(logp_with, dtype=np.float64),
        "logp_without": np.asarray(logp_without, dtype=np.float64),
        "kl": np.asarray(kl, dtype=np.float64),
    }
    for name, a in arrays.items():
        if a.shape != (n,):
            raise InputError(f"{name} has shape {a.shape}, expected ({n},) like the token pieces", field=name)
        if not np.all(np.isfinite(a)):
            raise InputError("non-finite value (NaN or inf)", field=name)
    top1 = np.asarray(top1_without, dtype=bool)
    if top1.shape != (n,):
        raise InputError(f"top1_without has shape {top1.shape}, expected ({n},)", field="top1_without")
    if not math.isfinite(margin):
        raise InputError("margin must be finite", field="margin")
    pmi = arrays["logp_with"] - arrays["logp_without"]
    if query_match not in ("normalised", "exact"):
        raise InputError(
            f"query_match must be 'normalised' or 'exact', got {query_match!r}", field="query_match"
        )
    qterms = query_terms(query)
    qexact = {_norm(w) for w in _WORD_RE.findall(query)}
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in pieces])]).astype(int)
    out: list[TokenAttribution | None] = [None] * n
    for group in word_groups(pieces):
        word = "".join(pieces[i] for i in group)
        wpmi = float(pmi[group].sum())
        src: TokenSource = "neutral"
        if not wordlike(word):
            pass
        elif supported_by(word, qterms) if query_match == "normalised" else _norm(word) in qexact:
            src = "query"
        else:
            if wpmi > margin:
                src = "context"
            elif bool(top1[group].all()):
                src = "memory"
        for i in group:
            out[i] = TokenAttribution(
                text=pieces[i],
                source=src,
                pmi=float(pmi[i]),
                kl=float(arrays["kl"][i]),
                logp_with=float(arrays["logp_with"][i]),
                logp_without=float(arrays["logp_without"][i]),
                word_pmi=wpmi,
                start=int(offsets[i]),
                end=int(offsets[i + 1]),
            )
    return [t for t in out if t is not None]


def merge_spans(tokens: Sequence[TokenAttribution]) -> list[Span]:
    """Merge consecutive tokens of one source into spans (whitespace trimmed from the edges).

    Neutral whitespace/punctuation between two spans of the same source joins them, so
    "Jules Verne" is one memory span even though it is two words.
    """
    spans: list[Span] = []
    i = 0
    n = len(tokens)
    while i < n:
        src = tokens[i].source
        j = i + 1
        while j < n:
            if tokens[j].source == src:
                j += 1
                continue
            # bridge a run of blank pieces between two runs of the same source
            k = j
            while k < n and not tokens[k].text.strip():
                k += 1
            if src != "neutral" and k < n and k > j and tokens[k].source == src:
                j = k
                continue
            break
        start, end = tokens[i].start, tokens[j - 1].end
        text = "".join(t.text for t in tokens[i:j])
        lead = len(text) - len(text.lstrip())
        trail = len(text) - len(text.rstrip())
        if text.strip():
            spans.append(
                Span(
                    text=text.strip(),
                    source=src,
                    start=start + lead,
                    end=end - trail,
                    pmi=float(sum(t.pmi for t in tokens[i:j])),
                )
            )
        i = j
    return spans


def content_word(
    word: str, query: frozenset[str] | set[str] = frozenset(), n_tokens: int | None = None
) -> bool:
    """Whether a word names something (a name, a number or a term): the one content-word test of
    the item-level source (:func:`mnemoscope.audit.verdict.decide_source`).

    A word of the query (``query``: :func:`query_terms`) is never content, nor a function or
    discourse word. Otherwise a word is content when it

    * holds a digit ("1948", "14", "F-16");
    * is capitalised ("Paris", "Hollis") or has a capital inside ("mRNA", "iPhone");
    * is written in a script without case (Chinese, Japanese, Arabic, Hindi, ...): no capital
      to tell a name by, so every such word counts;
    * is a rare word for the model: split by its tokenizer into :data:`RARE_WORD_TOKENS` or more
      pieces (``n_tokens``; "photosynthesis", an invented "zorblat"), which works for any
      tokenizer and language without a word list.

    Prior words ("written", "painting", "collection") are predictable from the answer so far
    but carry no fact: they stay marked at the token level and do not count here.

    Example:
        >>> content_word("Jules"), content_word("1948"), content_word("written"), content_word("However")
        (True, True, False, False)
        >>> content_word("zorblat", n_tokens=3), content_word("東京"), content_word("Paris", query_terms("Is Paris big?"))
        (True, True, False)
    """
    w = _norm(word)
    if not w or not any(ch.isalnum() for ch in w) or supported_by(word, query):
        return False
    if w in _FUNCTION_WORDS or w in _DISCOURSE_WORDS:
        return False
    core = word.strip().strip("'’-\"()[]{}.,;:!?")
    if any(ch.isdigit() for ch in core):
        return True
    letters = [ch for ch in core if ch.isalpha()]
    if not letters:
        return False
    if letters[0].isupper() or any(ch.isupper() for ch in letters[1:]):
        return True
    if all(ch.lower() == ch.upper() for ch in letters):  # no case in this script
        return True
    return n_tokens is not None and n_tokens >= RARE_WORD_TOKENS


def salient(text: str) -> bool:
    """Whether a span names something: any of its words is a :func:`content_word` (kept for callers
    of the span-level test; the item-level source uses :func:`content_word` on words).

    Example:
        >>> salient("Jules Verne"), salient("1948"), salient("written"), salient("However")
        (True, True, False, False)
    """
    return any(content_word(w) for w in _WORD_RE.findall(text))


@dataclass(frozen=True)
class Word:
    """One word of an answer: its text, its source, how many tokens it has, its offsets."""

    text: str
    source: TokenSource
    n_tokens: int
    start: int
    end: int


def answer_words(tokens: Sequence[TokenAttribution]) -> list[Word]:
    """The answer's words (the grouping :func:`attribute_tokens` labels), blanks and punctuation left out."""
    out = []
    for group in word_groups([t.text for t in tokens]):
        text = "".join(tokens[i].text for i in group)
        if not text.strip() or _is_punct(text.strip()):
            continue
        lead = len(text) - len(text.lstrip())
        first = tokens[group[0]]
        out.append(
            Word(
                text=text.strip(),
                source=first.source,
                n_tokens=len(group),
                start=first.start + lead,
                end=first.start + lead + len(text.strip()),
            )
        )
    return out


def context_token_fraction(tokens: Sequence[TokenAttribution]) -> float | None:
    """Share of context- or memory-attributed tokens that the context supports (``neutral`` and
    ``query`` tokens are neither); ``None`` when no token is attributed either way."""
    ctx = sum(t.source == "context" for t in tokens)
    mem = sum(t.source == "memory" for t in tokens)
    return None if ctx + mem == 0 else ctx / (ctx + mem)


def content_word_pmis(pieces: Sequence[str], pmi: np.ndarray, query: str) -> np.ndarray:
    """PMI of every content word of one answer (for :func:`calibrate_margin`)."""
    qterms = query_terms(query)
    vals = []
    for group in word_groups(pieces):
        word = "".join(pieces[i] for i in group)
        if _content(word, qterms):
            vals.append(float(np.asarray(pmi)[group].sum()))
    return np.asarray(vals, dtype=np.float64)


def calibrate_margin(memory_word_pmis: Sequence[float] | np.ndarray, quantile: float = 0.9) -> float:
    """The PMI margin: the ``quantile`` of content-word PMI on answers known to come from memory.

    At most ``1 - quantile`` of memory words then exceed it (in the calibration data); the
    margin never goes below ``log 2``.

    Example:
        >>> round(calibrate_margin(np.linspace(0, 2, 11), 0.9), 3)
        1.8
        >>> round(calibrate_margin([0.0, 0.1]), 3)
        0.693
    """
    v = np.asarray(memory_word_pmis, dtype=np.float64)
    v = v[np.isfinite(v)]
    if not 0 < quantile < 1:
        raise InputError(f"quantile must be in (0, 1), got {quantile}", field="quantile")
    if len(v) == 0:
        return MIN_MARGIN
    return float(max(MIN_MARGIN, np.quantile(v, quantile)))
