"""Text-side grounding of an answer: which words answer the query, and which passage states them.

Two pure questions, no model call (the counterfactual side, *would the model write it without
the context*, is :mod:`mnemoscope.features.facts`):

* **which words answer the query** (:func:`answer_bearing`): the answer's content words that the
  query does not contain, in the sentence that answers it. Found by what they are, not by
  capitalisation: a lowercase term ("mitochondria", "pancreas"), a number ("3.2%", "1,000"),
  a multi-word name ("Leonardo da Vinci"). Generic elaboration ("plays a crucial role", "is known
  for", "it is important") answers nothing: :data:`GENERIC_WORDS` leaves it out, and so does
  everything after the first sentence that carries an answer-bearing word (a small model's long
  answer states the answer first, then elaborates);
* **which passage states a phrase** (:func:`stating_passages`): a passage states a phrase when the
  phrase's terms appear in it as one contiguous run, after normalisation (case, punctuation,
  possessive, inflection, a number's digit grouping: :func:`~mnemoscope.features.attribution.text_terms`).
  "George Orwell" is not stated by a passage that names "George Tolkien" and elsewhere an
  "Orwell Street": support is decided over the whole phrase, so a name is decided where it
  parts from the passage (:func:`parting_word`).

Example:
    >>> pieces = [" The", " spleen", " plays", " a", " crucial", " role", " in", " producing",
    ...           " insulin", ".", " It", " filters", " blood", "."]
    >>> groups = answer_bearing(pieces, "Which organ makes insulin?")
    >>> ["".join(pieces[i] for i in g).strip() for g in groups]
    ['spleen']
    >>> stating_passages("George Orwell", ["George Tolkien wrote it.", "Orwell Street is long."])
    ()
    >>> stating_passages("Orwell", ["George Tolkien wrote it.", "George Orwell wrote 1984."])
    (1,)
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from mnemoscope.features.attribution import (
    DISCOURSE_WORDS,
    content_word,
    query_terms,
    supported_by,
    text_terms,
    word_groups,
    wordlike,
)

__all__ = [
    "FACTS_PARTICLES",
    "GENERIC_WORDS",
    "PARTICLES",
    "answer_bearing",
    "join_phrases",
    "parting_word",
    "sentence_ids",
    "states",
    "stating_passages",
]

#: Words of generic elaboration: they say how the answer relates to the query ("plays a crucial
#: role", "is known for", "located in", "according to the passage"), not what it is. Compared after
#: the same normalisation as every term (so "plays", "played", "playing" are one entry).
GENERIC_WORDS = frozenset(
    text_terms(
        " ".join(
            [
                # verbs of being, having, relating, saying
                "play plays role roles serve serves act acts function functions involve involves",
                "include includes including contain contains consist consists comprise comprises",
                "become became remain remains seem seems appear appears exist exists occur occurs",
                "make makes made produce produces producing produced create creates created",
                "help helps helped provide provides provided allow allows allowed enable enables",
                "use uses used using refer refers referred known call called named considered",
                "regarded described located situated found based according mentioned",
                "said says say tell tells told write writes wrote written show shows shown",
                "give gives given take takes taken get gets got keep keeps hold holds held",
                "responsible essential important crucial vital key significant major main primary",
                "central critical fundamental famous well widely commonly generally typically usually",
                "often frequently mostly mainly largely particularly especially specifically actually",
                "really simply clearly likely possibly probably approximately about around nearly",
                "many much several various different certain other others another number lot lots",
                "new old great good best better large small big high low long short whole entire",
                "part parts type types kind kinds form forms way ways thing things something",
                "example examples instance process processes system systems",
                "context passage passages text document documents information question provided",
                "given fact facts detail details term terms name word words mean means meaning",
                "answer answers correct true indeed sure note lie lies question questions",
                # evaluative elaboration ("a world-renowned player", "a legendary boxer")
                "renowned legendary notable prominent popular successful talented skilled exceptional",
                "incredible remarkable outstanding excellent prestigious iconic celebrated acclaimed",
                "influential leading world class career",
            ]
        )
    )
)


#: lowercase words that join the parts of a name ("Leonardo da Vinci", "Bank of England")
PARTICLES = frozenset(
    [
        "da",
        "de",
        "del",
        "della",
        "di",
        "do",
        "dos",
        "du",
        "van",
        "von",
        "der",
        "den",
        "la",
        "le",
        "bin",
        "ibn",
        "al",
        "of",
        "the",
        "y",
    ]
)


#: the particles of the ``facts`` selection (profiles calibrated before the grounded verdict join
#: their phrases as they were calibrated: without "the")
FACTS_PARTICLES = PARTICLES - {"the"}


#: a word after which "." does not end a sentence: an initial or a common short form
_ABBREVIATION = re.compile(r"[A-Z]|Mr|Mrs|Ms|Dr|St|Jr|Sr|Prof|Gen|Col|Lt|Mt|vs|etc|e\.g|i\.e|No|Vol|ca")

#: words of a refusal or a non-answer ("I do not know", "I cannot answer that", "Sorry"): nothing
#: the answer states
_NON_ANSWER = frozenset(
    text_terms("know knows cannot can't unable sorry unfortunately unknown unclear apologize apologise")
)


def _is_punct_piece(piece: str) -> bool:
    return bool(piece.strip()) and not any(ch.isalnum() for ch in piece)


def _is_generic(text: str) -> bool:
    ts = text_terms(text)
    return bool(ts) and all(t in GENERIC_WORDS or t in DISCOURSE_WORDS or t in _NON_ANSWER for t in ts)


def sentence_ids(pieces: Sequence[str], groups: Sequence[Sequence[int]]) -> list[int]:
    r"""The sentence of each word group: a new sentence starts at a word after ``.``, ``!`` or ``?``
    when a blank stands between them, and at a line break ("3.5" and "U.S." stay one sentence).

    Example:
        >>> p = [" Paris", ".", " It", " is", " 3", ".", "5", " km", "\n", "Yes"]
        >>> sentence_ids(p, word_groups(p))
        [0, 0, 1, 1, 1, 1, 1, 1, 2, 2]
    """
    out: list[int] = []
    sid = 0
    ended = False  # the previous word ended a sentence
    for k, g in enumerate(groups):
        text = "".join(pieces[i] for i in g)
        lead = text[: len(text) - len(text.lstrip())]
        if k and (("\n" in lead) or (ended and (lead or not text.strip()))):
            sid += 1
            ended = False
        out.append(sid)
        core = text.strip()
        if core:
            ended = core.endswith((".", "!", "?", "\u3002", "\uff01", "\uff1f"))
            before = (
                core[:-1] if core != "." else ("".join(pieces[i] for i in groups[k - 1]).strip() if k else "")
            )
            if core.endswith(".") and _ABBREVIATION.fullmatch(before.strip()):
                ended = False  # an initial or a short form ("J. K. Rowling", "Mr. Darcy", "St. Louis")
        if "\n" in text[len(text.rstrip()) :] or (not core and "\n" in text):
            ended = True
    return out


def join_phrases(
    groups: Sequence[list[int]],
    chosen: Sequence[bool],
    texts: Sequence[str],
    particles: frozenset[str] | None = None,
) -> list[list[int]]:
    """Runs of chosen words joined into one phrase ("Leonardo da Vinci", "J. K. Rowling", "Bank of
    England"): consecutive chosen words, or two joined by a name particle (``particles``, default
    :data:`PARTICLES`); anything else ends it."""
    parts = PARTICLES if particles is None else particles
    out: list[list[int]] = []
    cur: list[int] = []
    pending: list[int] = []
    for g, c, t in zip(groups, chosen, texts, strict=True):
        if c:
            if cur:
                cur += pending
            cur = cur + list(g)
            pending = []
        elif (
            cur
            and (not t.strip() or t.strip().lower() in parts)
            and len(pending) < 2
            # "the" only after another particle ("Day of the Dead"), never straight after a word
            # ("In 1066 the Normans": two phrases)
            and (t.strip().lower() != "the" or bool(pending))
        ):
            pending += list(g)
        else:
            if cur:
                out.append(cur)
            cur, pending = [], []
    if cur:
        out.append(cur)
    return out


def _merge_compounds(pieces: Sequence[str], groups: list[list[int]]) -> list[list[int]]:
    """Word groups with the parts of one written word joined where no blank separates them: a
    number's ("3" "." "2" "%" -> "3.2%", "1" "," "000" -> "1,000") and a hyphenated word's
    ("Kingsley" "-" "Hughes" -> "Kingsley-Hughes")."""
    out: list[list[int]] = []

    def text(g: Sequence[int]) -> str:
        return "".join(pieces[i] for i in g)

    for g in groups:
        t = text(g)
        joinable = bool(out) and bool(t) and not t[:1].isspace()
        if joinable and t in ("%", "\u2030") and text(out[-1]).strip()[-1:].isdigit():
            out[-1] = out[-1] + g
            continue
        if (
            joinable
            and t == "."
            and out
            and _ABBREVIATION.fullmatch(text(out[-1]).strip())
            and text(out[-1])[:1].isspace() | (len(out) == 1)
        ):
            out[-1] = out[-1] + g  # an initial or short form keeps its point: "J.", "Mr."
            continue
        if joinable and len(out) >= 2 and t[:1].isalnum():
            sep, before = text(out[-1]), text(out[-2]).strip()[-1:]
            if (sep in (".", ",") and t[:1].isdigit() and before.isdigit()) or (
                sep in ("-", "\u2010", "\u2011") and before.isalnum()
            ):
                mid = out.pop()
                out[-1] = out[-1] + mid + g
                continue
        out.append(list(g))
    return out


def answer_bearing(
    pieces: Sequence[str],
    query: str,
    sources: Sequence[Sequence[str]] = (),
    known: Sequence[Sequence[str]] = (),
) -> list[list[int]]:
    """The answer-bearing phrases of an answer, as token indices (module doc).

    Candidates are the answer's words that are not the query's, nor function or generic words
    (:data:`GENERIC_WORDS`). Only the first sentence that has a candidate counts. In it, the
    phrases that name something (a name, a number, a term split as rare, a word of a caseless
    script: :func:`~mnemoscope.features.attribution.content_word`) are the answer when there are
    any, consecutive ones (or joined by a name particle) forming one phrase ("Leonardo da Vinci",
    "3.2%", "Kingsley-Hughes"; the descriptor in "the Greek poet Homer" is not part of it), with
    the sentence's lowercase words that one of ``sources`` (the passages'
    :func:`~mnemoscope.features.attribution.text_terms`) states and ``known`` (the closed-book
    answer's) does not;
    otherwise each of its lowercase candidates is a phrase ("the mitochondria", "the spleen").
    Empty when no sentence has a candidate ("Yes.", "It is important.").
    """
    groups = _merge_compounds(pieces, word_groups(pieces))
    texts = ["".join(pieces[i] for i in g) for g in groups]
    qterms = query_terms(query)
    # the query's words are compared as support is (a number's grouping normalised too)
    q_all = frozenset(text_terms(query))

    def in_query(t: str) -> bool:
        ts = text_terms(t)
        return bool(ts) and all(x in q_all for x in ts)

    sids = sentence_ids(pieces, groups)
    # a generic word capitalised inside a sentence is part of a name ("New York", "Day of the Dead")
    inner_cap = [k > 0 and sids[k - 1] == sids[k] and t.strip()[:1].isupper() for k, t in enumerate(texts)]
    cand = [
        wordlike(t) and not supported_by(t, qterms) and not in_query(t) and (cap or not _is_generic(t))
        for t, cap in zip(texts, inner_cap, strict=True)
    ]
    hit = [s for s, c in zip(sids, cand, strict=True) if c]
    if not hit:
        return []
    first = hit[0]
    keep = [c and s == first for c, s in zip(cand, sids, strict=True)]
    # a word's token count tells a rare word only for one written word, not a hyphenated compound
    named = [
        k and content_word(t, qterms, None if any(_is_punct_piece(pieces[i]) for i in g) else len(g))
        for k, t, g in zip(keep, texts, groups, strict=True)
    ]
    if any(named):
        # names and numbers, each a phrase of its own words: a descriptor next to a name is
        # another claim ("the Greek poet Homer": "Homer"; "11 members": "11"); beside them, a
        # lowercase word that a passage states, and that the model's closed-book answer
        # (``known``) does not, is a claim too ("chivalry in medieval Europe": "chivalry",
        # "Europe"); elaboration that no passage states ("a legendary boxer") or that the model
        # writes anyway ("the city") is not
        stated = [
            k
            and not n
            and any(states(text_terms(t), ts) for ts in sources)
            and not any(states(text_terms(t), ts) for ts in known)
            for k, n, t in zip(keep, named, texts, strict=True)
        ]
        return join_phrases(groups, named, texts) + [
            list(g) for g, st in zip(groups, stated, strict=True) if st
        ]
    # no name: each lowercase word is a claim of its own ("boxing", "malted", "barley")
    return [list(g) for g, k in zip(groups, keep, strict=True) if k]


def states(phrase_terms: Sequence[str], passage_terms: Sequence[str]) -> bool:
    """Whether ``phrase_terms`` occur in ``passage_terms`` as one contiguous run."""
    n = len(phrase_terms)
    if n == 0:
        return False
    first = phrase_terms[0]
    for i, t in enumerate(passage_terms):
        if t == first and list(passage_terms[i : i + n]) == list(phrase_terms):
            return True
    return False


def stating_passages(phrase: str, passages: Sequence[str] | Sequence[Sequence[str]]) -> tuple[int, ...]:
    """Indices of the passages that state ``phrase`` (module doc). ``passages`` are texts, or their
    :func:`~mnemoscope.features.attribution.text_terms` already computed."""
    pt = text_terms(phrase)
    out = []
    for j, p in enumerate(passages):
        terms = text_terms(p) if isinstance(p, str) else p
        if states(pt, terms):
            out.append(j)
    return tuple(out)


def parting_word(words: Sequence[str], passages_terms: Sequence[Sequence[str]]) -> int:
    """Where a phrase parts from the context: the index of its first word such that no passage
    states the phrase up to it (:func:`states`), or ``-1`` when a passage states the whole phrase.
    "George Orwell" against "George Tolkien" parts at 1 ("Orwell").

    Example:
        >>> parting_word(["George", " Orwell"], [text_terms("George Tolkien wrote it.")])
        1
    """
    acc: list[str] = []
    for i, w in enumerate(words):
        acc = acc + text_terms(w)
        if acc and not any(states(acc, p) for p in passages_terms):
            return i
    return -1
