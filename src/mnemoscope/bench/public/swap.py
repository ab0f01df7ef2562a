"""Entity-swap knowledge conflicts (Longpre et al. 2021, "Entity-Based Knowledge Conflicts in
Question Answering"): the answer in the passage is replaced, every occurrence, by another answer
of the same type drawn from other questions.

Types (:func:`answer_type`; the first rule that applies, else the answer is not swapped):

* ``year``: four digits, 1000-2099 (``"1858"``);
* ``date``: a month name with a day and/or a year (``"June 5, 1944"``, ``"5 June 1944"``,
  ``"June 1944"``, ``"June 5"``); the key is the shape, so a substitute is written the same way;
* ``number``: a number (digits, thousands commas, decimals) and an optional unit of one or two
  words or ``%`` (``"3,000"``, ``"12.5 km"``, ``"40%"``, ``"5 million"``); the substitute is
  another answer's *number* with this answer's *unit* kept, integer for integer, decimal for
  decimal;
* ``name``: a capitalised name of 2-5 words (every word capitalised, except connectors such as
  "of", "the", "de" inside it; no digits), sub-typed by the answer and the question: a name
  with an organisation word (:data:`ORG_WORDS`: University, Company, Party, Army, ...) or an
  acronym, or asked by "which/what university, company, team, ..." -> ``org``; asked by
  ``who``/``whom``/``whose`` -> ``person``; asked by ``where`` or "which/what city, country,
  state, ...", or with a place word (:data:`PLACE_WORDS`: Ocean, River, Street, ...) -> ``place``;
  otherwise ``name``. Lists ("Zeus, Poseidon and Hades") are not names. A name that is (or contains) the
  article's title is not swapped: the article is about it, and replacing its subject rewrites the
  passage rather than one fact. The substitute has the same sub-type and, where the pool allows,
  the same number of words.

Example:
    >>> answer_type("1858"), answer_type("12.5 km"), answer_type("June 5, 1944")
    (('year', ''), ('number', 'decimal| km'), ('date', 'M D, Y'))
    >>> answer_type("Saint Bernadette Soubirous", "To whom did Mary appear?")
    ('name', 'person')
    >>> answer_type("a copper statue") is None
    True
    >>> swap_answer("Paris is big. Paris-born men love Paris.", "Paris", "Lyon")
    ('Lyon is big. Lyon-born men love Lyon.', 3)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "CONNECTORS",
    "ORG_WORDS",
    "PLACE_WORDS",
    "answer_type",
    "number_substitute",
    "substitute_pools",
    "swap_answer",
]

_MONTH = (
    r"(January|February|March|April|May|June|July|August|September|October|November|December|"
    r"Jan\.?|Feb\.?|Mar\.?|Apr\.?|Jun\.?|Jul\.?|Aug\.?|Sept?\.?|Oct\.?|Nov\.?|Dec\.?)"
)
_DATES = [
    (re.compile(rf"^{_MONTH} \d{{1,2}}, \d{{4}}$"), "M D, Y"),
    (re.compile(rf"^\d{{1,2}} {_MONTH},? \d{{4}}$"), "D M Y"),
    (re.compile(rf"^{_MONTH},? \d{{4}}$"), "M Y"),
    (re.compile(rf"^{_MONTH} \d{{1,2}}$"), "M D"),
    (re.compile(rf"^\d{{1,2}} {_MONTH}$"), "D M"),
]
_YEAR = re.compile(r"^(1\d{3}|20\d{2})$")
_NUMBER = re.compile(
    r"^(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(\s*%|\s+[A-Za-z][A-Za-z-]*(?:\s+[A-Za-z][A-Za-z-]*)?)?$"
)
#: lower-case words a capitalised name may hold inside it
CONNECTORS = frozenset(
    [
        "of",
        "the",
        "de",
        "del",
        "della",
        "der",
        "di",
        "da",
        "du",
        "la",
        "le",
        "von",
        "van",
        "y",
        "and",
        "for",
        "on",
        "in",
        "at",
        "upon",
    ]
)
_PLACE_Q = re.compile(
    r"^(where\b|.*\b(which|what) (city|cities|country|countries|state|states|town|region|province|"
    r"county|river|island|continent|place|nation|capital|area|location)\b)",
    re.IGNORECASE,
)
_ORG_Q = re.compile(
    r"\b(which|what) (university|college|school|company|team|club|organi[sz]ation|agency|party|"
    r"band|newspaper|institution|group|firm|network|church|league)\b",
    re.IGNORECASE,
)
_PERSON_Q = re.compile(
    r"^\s*(who|whom|whose)\b|\b(who|whom|whose) (was|is|were|did|had|has)\b", re.IGNORECASE
)


#: words that make a name an organisation's ("Imperial Diet", "Soviet NKVD" is caught as an acronym)
ORG_WORDS = frozenset(
    [
        "university",
        "college",
        "school",
        "institute",
        "academy",
        "company",
        "corporation",
        "inc",
        "ltd",
        "group",
        "bank",
        "church",
        "party",
        "council",
        "union",
        "army",
        "navy",
        "force",
        "forces",
        "diet",
        "parliament",
        "congress",
        "senate",
        "court",
        "ministry",
        "department",
        "office",
        "agency",
        "committee",
        "commission",
        "society",
        "association",
        "federation",
        "league",
        "club",
        "team",
        "museum",
        "library",
        "government",
        "assembly",
        "board",
        "foundation",
        "network",
        "records",
        "studios",
        "press",
        "times",
        "post",
        "journal",
        "orchestra",
        "band",
    ]
)


#: words that make a name a place's ("Atlantic Ocean", "Saint Petersburg" is not caught)
PLACE_WORDS = frozenset(
    [
        "ocean",
        "sea",
        "river",
        "lake",
        "mountains",
        "mountain",
        "mount",
        "island",
        "islands",
        "bay",
        "gulf",
        "valley",
        "desert",
        "city",
        "county",
        "province",
        "state",
        "street",
        "avenue",
        "road",
        "square",
        "park",
        "bridge",
        "coast",
        "peninsula",
        "strait",
        "canal",
        "forest",
        "hills",
        "plain",
        "basin",
        "region",
        "republic",
        "kingdom",
    ]
)
_ROMAN = re.compile(r"^[IVXLC]+$")


def _words_in(answer: str, words: frozenset[str]) -> bool:
    return any(w.casefold().strip(".,") in words for w in answer.split())


def _is_org(answer: str) -> bool:
    return _words_in(answer, ORG_WORDS) or any(
        len(w) >= 2 and w.isupper() and not _ROMAN.match(w) for w in answer.split()
    )


def _is_name(answer: str) -> bool:
    words = answer.split()
    if not 2 <= len(words) <= 5 or any(ch.isdigit() for ch in answer) or "," in answer or " and " in answer:
        return False
    if not (words[0][:1].isupper() and words[-1][:1].isupper()):
        return False
    return all(w[:1].isupper() or w in CONNECTORS for w in words)


def answer_type(answer: str, question: str = "", title: str = "") -> tuple[str, str] | None:
    """``(type, key)`` of an answer by the rules above (``key``: what a substitute must share), or
    ``None`` when the answer is not swapped."""
    a = answer.strip()
    if _YEAR.match(a):
        return ("year", "")
    for pat, shape in _DATES:
        if pat.match(a):
            return ("date", shape)
    m = _NUMBER.match(a)
    if m:
        unit = m.group(3) or ""
        return ("number", ("decimal" if m.group(2) else "integer") + "|" + unit)
    if _is_name(a):
        t, n = f" {' '.join(title.replace('_', ' ').casefold().split())} ", f" {a.casefold()} "
        if t.strip() and (t in n or n in t):  # whole words: title "A" is not in "Tom Hart"
            return None
        if _is_org(a) or _ORG_Q.search(question):
            return ("name", "org")
        if _PERSON_Q.search(question):
            return ("name", "person")
        if _PLACE_Q.search(question) or _words_in(a, PLACE_WORDS):
            return ("name", "place")
        return ("name", "name")
    return None


def swap_answer(passage: str, answer: str, substitute: str) -> tuple[str, int]:
    """``passage`` with every whole-word occurrence of ``answer`` (case as written) replaced by
    ``substitute``, and how many were replaced."""
    pat = re.compile(r"(?<![^\W_])" + re.escape(answer) + r"(?![^\W_])")
    return pat.subn(lambda _m: substitute, passage)


def _number_parts(answer: str) -> tuple[str, str] | None:
    m = _NUMBER.match(answer.strip())
    return None if m is None else (m.group(1) + (m.group(2) or ""), m.group(3) or "")


def number_substitute(answer: str, other: str) -> str | None:
    """``other``'s number with ``answer``'s unit (``None`` when either is not a number answer)."""
    a, o = _number_parts(answer), _number_parts(other)
    if a is None or o is None:
        return None
    return o[0] + a[1]


def substitute_pools(rows: Sequence[dict[str, Any]]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """Candidate substitutes per type key: ``(type, key) -> [(answer, title), ...]`` over the gold
    answers of ``rows`` (deduplicated, in a fixed order). Numbers are pooled by integer/decimal
    and by unit (a substitute of the same unit is tried first; the unit always comes from the answer
    being swapped); names also under
    ``("name", "<subtype>|<words>")`` so a same-length substitute can be preferred."""
    pools: dict[tuple[str, str], dict[str, str]] = {}
    for r in rows:
        gold = r["answers"][0]
        t = answer_type(gold, r["question"], r["title"])
        if t is None:
            continue
        keys = [t]
        if t[0] == "number":
            keys = [t, ("number", t[1].split("|")[0])]
        elif t[0] == "name":
            keys.append(("name", f"{t[1]}|{len(gold.split())}"))
        for k in keys:
            pools.setdefault(k, {}).setdefault(gold, r["title"])
    return {k: sorted(v.items()) for k, v in sorted(pools.items())}


def pick_substitutes(
    gold: str,
    kind: tuple[str, str],
    title: str,
    pools: dict[tuple[str, str], list[tuple[str, str]]],
    rng: np.random.Generator,
    tries: int = 30,
) -> list[str]:
    """Up to ``tries`` candidate substitutes for ``gold`` (of type ``kind``), in a seeded random
    order: answers of other articles, never ``gold`` itself; for names, those of the same number
    of words first."""
    typ, key = kind
    if typ == "number":
        # the same unit first ("km" for "km"), then any number of the same shape (unit kept)
        firsts: list[list[tuple[str, str]]] = [
            pools.get(kind, []),
            pools.get(("number", key.split("|")[0]), []),
        ]
    elif typ == "name":
        firsts = [pools.get(("name", f"{key}|{len(gold.split())}"), []), pools.get(("name", key), [])]
    else:
        firsts = [pools.get(kind, [])]
    out: list[str] = []
    for cands in firsts:
        if not cands:
            continue
        for i in rng.permutation(len(cands))[:tries]:
            ans, t = cands[int(i)]
            if t == title or ans.casefold() == gold.casefold():
                continue
            sub = number_substitute(gold, ans) if typ == "number" else ans
            if sub is not None and sub not in out and sub.casefold() != gold.casefold():
                out.append(sub)
    return out
