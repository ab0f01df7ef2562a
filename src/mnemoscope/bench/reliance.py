"""The context-reliance benchmark: does the model answer from memory or from the given context?

This is the evaluation set for RePCS, which compares the model's answer distribution with and
without a retrieved context. Every record is a (context, query, answer) triple whose context
states the answer, so every item is answerable open-book. The three kinds differ in whether the
answer is also available closed-book:

* **memorized** (label 1) - 150 well-known facts that even a 135M-parameter model may answer
  without the context: 60 capitals of well-known countries, 30 authors of very famous books,
  25 chemical symbols of common elements and 35 other very common facts (largest planet, days
  in a week, the currency of Japan, ...). Written by hand from general knowledge.
* **memorized_paraphrased** (label 1) - the same 150 facts (same ``fact_id``, context and
  answer) asked with a differently worded question.
* **clean** (label 0) - 150 facts about invented entities (countries, cities, writers,
  elements, planets, compounds, creatures, ...) whose names are built from syllable tables, so
  no model can know them. Their categories, question forms and context style mirror the
  memorized items (60 capital, 30 author, 25 element, 35 misc), so the two classes are not
  separable by question form alone.

Record schema (one JSON object per line)::

    {"id": "rel-mem-000" | "rel-para-000" | "rel-clean-000", "kind": ..., "label": 1 | 0,
     "fact_id": "fact-000" | "clean-000", "category": "capital" | "author" | "element" | "misc",
     "context": ..., "query": ..., "answer": ..., "aliases": [...]}

A generation is scored with :func:`answer_matches` (case-, accent- and punctuation-insensitive,
whole words and whole numbers only). Only ``random.Random(seed)`` and the hard-coded tables
below are used, so the output is byte-identical on every run. The shipped file is regenerated
with::

    python -m mnemoscope.bench.reliance --out src/mnemoscope/bench/data

Example:
    >>> from mnemoscope.bench.reliance import answer_matches, load_reliance
    >>> items = load_reliance()
    >>> len(items), sum(item["label"] for item in items)
    (450, 300)
    >>> answer_matches("The capital is PARIS.", items[0])
    True
"""

from __future__ import annotations

import argparse
import random
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from mnemoscope.bench.corpus import read_jsonl, to_jsonl
from mnemoscope.bench.tables import load_tables

_T = load_tables("reliance_tables.json")

__all__ = [
    "CATEGORIES",
    "KINDS",
    "LABELS",
    "RELIANCE_FILE",
    "answer_matches",
    "generate_reliance",
    "load_reliance",
    "main",
    "write_reliance",
]

RELIANCE_FILE = "context_reliance.jsonl"
KINDS = ("memorized", "memorized_paraphrased", "clean")
LABELS = {"memorized": 1, "memorized_paraphrased": 1, "clean": 0}
CATEGORIES = ("capital", "author", "element", "misc")
_ID_PREFIX = _T["id_prefix"]

Record = dict[str, Any]

# ---------------------------------------------------------------------------------------
# Memorized facts (hand-written; every statement is meant to be plainly correct)
# ---------------------------------------------------------------------------------------

# (country as used in "the capital of X", capital, context, aliases)
_CAPITALS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = _T["capitals"]

# (the work as used in "Who wrote X?", author, context, aliases)
_AUTHORS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = _T["authors"]

# (element, symbol, atomic number, description completing "It is ...")
_ELEMENTS: tuple[tuple[str, str, int, str], ...] = _T["elements"]

# (context, query, paraphrased query, answer, aliases)
_MISC: tuple[tuple[str, str, str, str, tuple[str, ...]], ...] = _T["misc"]

_CAPITAL_QUERY = "What is the capital of {x}?"
_AUTHOR_QUERY = "Who wrote {x}?"
_ELEMENT_QUERY = "What is the chemical symbol for {x}?"

# Paraphrases: one is drawn per fact with the seeded generator ("{X}" = capitalised subject).
_CAPITAL_PARAPHRASES = _T["capital_paraphrases"]
_AUTHOR_PARAPHRASES = _T["author_paraphrases"]
_ELEMENT_PARAPHRASES = _T["element_paraphrases"]


def _fill(template: str, subject: str) -> str:
    return template.format(x=subject, X=subject[:1].upper() + subject[1:])


def _paraphrase(rng: random.Random, templates: Sequence[str], subject: str) -> str:
    options = [t for t in templates if not ("{x}'s" in t and subject.endswith("s"))]
    return _fill(rng.choice(options), subject)


def _memorized_facts(rng: random.Random) -> list[tuple[str, str, str, str, str, list[str]]]:
    """(category, context, query, paraphrase, answer, aliases) for the 150 memorized facts."""
    facts: list[tuple[str, str, str, str, str, list[str]]] = []
    for country, city, context, aliases in _CAPITALS:
        query = _fill(_CAPITAL_QUERY, country)
        facts.append(
            ("capital", context, query, _paraphrase(rng, _CAPITAL_PARAPHRASES, country), city, list(aliases))
        )
    for work, author, context, aliases in _AUTHORS:
        query = _fill(_AUTHOR_QUERY, work)
        facts.append(
            ("author", context, query, _paraphrase(rng, _AUTHOR_PARAPHRASES, work), author, list(aliases))
        )
    for name, symbol, number, desc in _ELEMENTS:
        context = f"{name.capitalize()} is a chemical element with the symbol {symbol} and atomic number {number}. It is {desc}."
        query = _fill(_ELEMENT_QUERY, name)
        facts.append(("element", context, query, _paraphrase(rng, _ELEMENT_PARAPHRASES, name), symbol, []))
    for context, query, para, answer, aliases in _MISC:
        facts.append(("misc", context, query, para, answer, list(aliases)))
    return facts


# ---------------------------------------------------------------------------------------
# Answer matching
# ---------------------------------------------------------------------------------------

# A digit-grouping comma ("7,000" -> "7000") so that a grouped number is one whole number.
_DIGIT_GROUP = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
# Tokens: an optional minus sign that is not a hyphen after a word ("-7" but not "5-7"), then a
# decimal number ("7.5") or a run of letters and digits ("17", "h2o", "paris"). Everything else
# (spaces, punctuation, underscores) separates tokens.
_TOKEN = re.compile(r"(?:(?<![^\W_])-(?=\d))?(?:\d+(?:\.\d+)+|[^\W_]+)")


def _normalise(text: str) -> str:
    """Casefolded, accent-free tokens joined by single spaces ("Bogotá, D.C.!" -> "bogota d c")."""
    decomposed = unicodedata.normalize("NFKD", text)
    stripped = "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()
    return " ".join(_TOKEN.findall(_DIGIT_GROUP.sub("", stripped)))


def _collapse_initials(normalised: str) -> str:
    """Runs of two or more single letters joined into one token ("j k rowling" -> "jk rowling")."""
    out: list[str] = []
    run: list[str] = []
    for token in [*normalised.split(), ""]:
        if len(token) == 1 and token.isalpha():
            run.append(token)
            continue
        if len(run) >= 2:
            out.append("".join(run))
        else:
            out.extend(run)
        run = []
        if token:
            out.append(token)
    return " ".join(out)


def _accepted(item: Record) -> list[str]:
    return [str(item["answer"]), *(str(a) for a in item.get("aliases", ()))]


def answer_matches(generation: str, item: Record) -> bool:
    """True if the item's answer or one of its aliases occurs in ``generation`` as a whole word or phrase.

    Matching ignores case, accents, punctuation and spacing, and compares whole tokens only:
    ``"Paris"`` matches ``"It is paris."`` but not ``"Parisian"``, and ``"7"`` matches
    ``"7 days"`` but not ``"17"``, ``"7.5"``, ``"-7"`` or ``"7,000"``. Initials may be written
    with or without dots and spaces (``"J.K. Rowling"``, ``"JK Rowling"`` and ``"J. K. Rowling"``
    all match one another; so do ``"D.C."`` and ``"DC"``).
    """
    plain = _normalise(generation)
    haystack, collapsed = f" {plain} ", f" {_collapse_initials(plain)} "
    for candidate in _accepted(item):
        needle = _normalise(candidate)
        if not needle:
            continue
        if f" {needle} " in haystack or f" {_collapse_initials(needle)} " in collapsed:
            return True
    return False


# ---------------------------------------------------------------------------------------
# Clean items: invented entities
# ---------------------------------------------------------------------------------------

_ONSETS = _T["onsets"]
_NUCLEI = _T["nuclei"]
_CODAS = _T["codas"]
_COUNTRY_ENDINGS = _T["country_endings"]
_FIRST_ENDINGS = _T["first_endings"]
_ELEMENT_ENDINGS = _T["element_endings"]
_COMPOUND_ENDINGS = _T["compound_endings"]
_LANGUAGE_ENDINGS = _T["language_endings"]
_BLOCKED = _T["blocked"]

_REAL_SYMBOLS = frozenset(
    re.findall(
        r"\S+",
        """H He Li Be B C N O F Ne Na Mg Al Si P S Cl Ar K Ca Sc Ti V Cr Mn Fe Co Ni Cu Zn Ga Ge As Se
    Br Kr Rb Sr Y Zr Nb Mo Tc Ru Rh Pd Ag Cd In Sn Sb Te I Xe Cs Ba La Ce Pr Nd Pm Sm Eu Gd Tb Dy
    Ho Er Tm Yb Lu Hf Ta W Re Os Ir Pt Au Hg Tl Pb Bi Po At Rn Fr Ra Ac Th Pa U Np Pu Am Cm Bk Cf
    Es Fm Md No Lr Rf Db Sg Bh Hs Mt Ds Rg Cn Nh Fl Mc Lv Ts Og""",
    )
)
_TWO_LETTER_WORDS = frozenset(
    re.findall(
        r"\S+",
        """ad ah am an as at ax be by do dr eh em en go ha he hi id if in is it jr lb lo ma me mm mr ms
    mu my no nt of oh oi ok on or ox pa pc pi pm re rd sr st so th to tv uh um un up ur us vs we
    yo ye""",
    )
)

_ORDINALS = _T["ordinals"]
_LANDMARKS = _T["landmarks"]
_ELEMENT_DESCS = _T["element_descs"]
_JOBS = _T["jobs"]
_TITLE_NOUNS = _T["title_nouns"]
_TITLE_ADJS = _T["title_adjs"]
_SEASONS = _T["seasons"]
_PRONOUNS = ("He", "She")


class _Namer:
    """Invents pronounceable names, never the same one twice and never a ``reserved`` word."""

    def __init__(self, rng: random.Random, reserved: Iterable[str]) -> None:
        self.rng = rng
        self.used: set[str] = {w.lower() for w in reserved}

    def _syllables(self, count: int) -> str:
        rng = self.rng
        parts = []
        for i in range(count):
            onset = "" if i == 0 and rng.random() < 0.15 else rng.choice(_ONSETS)
            coda = rng.choice(_CODAS) if i == count - 1 else rng.choice(("", "", "n", "r", "l", "s"))
            parts.append(onset + rng.choice(_NUCLEI) + coda)
        return "".join(parts)

    def _fresh(self, make: Callable[[], str], lo: int = 5, hi: int = 9) -> str:
        while True:
            word = make()
            low = word.lower()
            if lo <= len(word) <= hi and low not in self.used and not any(b in low for b in _BLOCKED):
                self.used.add(low)
                return word

    def _count(self) -> int:
        return 3 if self.rng.random() < 0.25 else 2

    def place(self) -> str:
        return self._fresh(lambda: self._syllables(self._count()).capitalize())

    def country(self) -> str:
        return self._fresh(
            lambda: (self._syllables(self.rng.randint(1, 2)) + self.rng.choice(_COUNTRY_ENDINGS)).capitalize()
        )

    def person(self) -> tuple[str, str]:
        """(full name, surname)."""
        first = self._fresh(
            lambda: (self._syllables(self.rng.randint(1, 2)) + self.rng.choice(_FIRST_ENDINGS)).capitalize(),
            lo=4,
        )
        last = self.place()
        return f"{first} {last}", last

    def element(self) -> str:
        return self._fresh(
            lambda: self._syllables(self.rng.randint(1, 2)) + self.rng.choice(_ELEMENT_ENDINGS)
        )

    def compound(self) -> str:
        return self._fresh(lambda: self._syllables(2) + self.rng.choice(_COMPOUND_ENDINGS))

    def language(self) -> str:
        return self._fresh(
            lambda: (
                self._syllables(self.rng.randint(1, 2)) + self.rng.choice(_LANGUAGE_ENDINGS)
            ).capitalize()
        )

    def common(self, lo: int = 4, hi: int = 8) -> str:
        """A lowercase invented common noun (a currency, a creature, a substance)."""
        return self._fresh(lambda: self._syllables(self.rng.randint(1, 2)), lo=lo, hi=hi)

    def symbol(self, name: str) -> str | None:
        """A two-letter symbol from ``name``: no real element, no common word or abbreviation, unused.

        The second letter is a consonant taken from the third letter on ("pendium" -> "Pn", not
        "Pe"), so the symbol cannot be guessed as simply the first two letters of the name.
        """
        for letter in name[2:]:
            sym = name[0].upper() + letter.lower()
            low = sym.lower()
            if letter in "aeiouy" or low == name[:2] or low in self.used:
                continue
            if sym in _REAL_SYMBOLS or low in _TWO_LETTER_WORDS:
                continue
            self.used.add(low)
            return sym
        return None


_ONES = _T["ones"]
_TENS = _T["tens"]


def _number_words(n: int) -> str:
    """English words for 0 <= n < 100 ("thirty-seven")."""
    if n < 20:
        return _ONES[n]
    tens, ones = divmod(n, 10)
    return _TENS[tens] + (f"-{_ONES[ones]}" if ones else "")


class _Numbers:
    """Draws numeric answers that are unused and occur, as digits or words, in no memorized text."""

    def __init__(self, rng: random.Random, texts: Iterable[str]) -> None:
        self.rng = rng
        self.memorized = "\n".join(f" {_normalise(t)} " for t in texts)
        self.used: set[int] = set()

    def _free(self, n: int) -> bool:
        forms = [str(n), _normalise(_number_words(n))] if n < 100 else [str(n)]
        return n not in self.used and not any(f" {form} " in self.memorized for form in forms)

    def draw(self, lo: int, hi: int) -> tuple[str, list[str]]:
        """(digits, [words]) for a free number in ``lo..hi`` (no words from 100 on)."""
        n = self.rng.choice([n for n in range(lo, hi + 1) if self._free(n)])
        self.used.add(n)
        return str(n), ([_number_words(n)] if n < 100 else [])


# A clean builder returns (context, query, answer, aliases).
Clean = tuple[str, str, str, list[str]]


def _clean_capital(rng: random.Random, nm: _Namer, i: int) -> Clean:
    country = nm.country()
    if rng.random() < 0.15:
        country = f"the {country} Islands"
    city = nm.place()
    templates = (
        lambda: f"{city} is the capital and largest city of {country}. It lies on the river {nm.place()}.",
        lambda: f"{city} is the capital of {country}. It stands at the mouth of the river {nm.place()}.",
        lambda: (
            f"{city} is the capital and most populous city of {country}. It lies on the shore of Lake {nm.place()}."
        ),
        lambda: f"{city} is the capital city of {country}. It is located in the province of {nm.place()}.",
        lambda: (
            f"{city} is the capital of {country}. It replaced {nm.place()} as the capital in {rng.randint(1700, 1950)}."
        ),
        lambda: (
            f"{city} is the capital of {country}. It was built as a planned city in the {rng.randint(170, 194)}0s."
        ),
        lambda: (
            f"{city} is the capital and largest city of {country}. It is famous for {rng.choice(_LANDMARKS)}."
        ),
        lambda: f"{city} is the capital of {country}. It lies in a valley below the {nm.place()} Mountains.",
    )
    context = templates[i % len(templates)]()
    return context, _fill(_CAPITAL_QUERY, country), city, []


def _title(rng: random.Random, nm: _Namer) -> str:
    place = nm.place()
    forms = (
        f"The {rng.choice(_TITLE_NOUNS)} of {place}",
        f"{place} in {rng.choice(_SEASONS)}",
        f"The {rng.choice(_TITLE_ADJS)} {rng.choice(_TITLE_NOUNS)} of {place}",
        f"A {rng.choice(_SEASONS)} in {place}",
    )
    return rng.choice(forms)


def _clean_author(rng: random.Random, nm: _Namer, i: int) -> Clean:
    author, last = nm.person()
    kind = i % 6
    if kind == 4:
        series = nm.place()
        work = f"the {series} books"
        context = (
            f"The {series} books are a series of children's novels written by {author}. "
            f"The first book in the series appeared in {rng.randint(1900, 1990)}."
        )
        return context, _fill(_AUTHOR_QUERY, work), author, [last]
    title = _title(rng, nm)
    if kind == 0:
        work = f"the novel {title}"
        context = f"{title} is a novel written by {author}. It tells the story of a {rng.choice(_JOBS)} from the town of {nm.place()}."
    elif kind == 1:
        work = f"the play {title}"
        context = f"{title} is a play by {author}. It is set in the harbour town of {nm.place()}."
    elif kind == 2:
        work = f"the epic poem {title}"
        context = (
            f"{title} is an epic poem by {author}. It follows the long voyage of the sailor {nm.place()}."
        )
    elif kind == 3:
        work = f"the novel {title}"
        context = f"{title} is a novel by {author}, published in {rng.randint(1700, 1990)}."
    else:
        work = f"the children's book {title}"
        context = f"{title} is a children's book written and illustrated by {author}."
    return context, _fill(_AUTHOR_QUERY, work), author, [last]


def _clean_element(rng: random.Random, nm: _Namer, i: int, numbers: _Numbers) -> Clean:
    while True:
        name = nm.element()
        symbol = nm.symbol(name)
        if symbol is not None:
            break
    number, _ = numbers.draw(119, 199)
    context = (
        f"{name.capitalize()} is a chemical element with the symbol {symbol} and atomic number {number}. "
        f"It is {rng.choice(_ELEMENT_DESCS)}."
    )
    return context, _fill(_ELEMENT_QUERY, name), symbol, []


def _clean_misc(rng: random.Random, nm: _Namer, i: int, numbers: _Numbers) -> Clean:
    kind = i % 18
    if kind == 0:
        planet, star = nm.place(), nm.place()
        ctx = f"{planet} is the largest planet orbiting the star {star}. It is a gas giant and the {rng.choice(_ORDINALS)} planet from its star."
        return ctx, f"What is the largest planet orbiting the star {star}?", planet, []
    if kind == 1:
        country = nm.country()
        n, words = numbers.draw(4, 29)
        ctx = f"In the old calendar of {country}, a week is a period of {n} days. Each day is named after a river."
        return ctx, f"How many days are there in a week of the old calendar of {country}?", n, words
    if kind == 2:
        lang, country = nm.language(), nm.country()
        ctx = f"{lang} is the official language of {country}. It is also spoken in the mountain valleys of {nm.country()}."
        return ctx, f"What language is spoken in {country}?", lang, []
    if kind == 3:
        cur, country = nm.common(), nm.country()
        ctx = f"The {cur} is the official currency of {country}. It is issued by the central bank in {nm.place()}."
        return ctx, f"What is the currency of {country}?", cur, [f"{cur}s"]
    if kind == 4:
        comp = nm.compound()
        n, words = numbers.draw(2, 99)
        ctx = f"Pure {comp} freezes at {n} degrees Celsius at standard atmospheric pressure. It is a colourless liquid with a faint smell."
        return ctx, f"At what temperature in degrees Celsius does {comp} freeze?", n, words
    if kind == 5:
        comp = nm.compound()
        n, words = numbers.draw(2, 99)
        ctx = f"At sea level, pure {comp} boils at {n} degrees Celsius. It is used to clean old glass."
        return ctx, f"At what temperature in degrees Celsius does {comp} boil at sea level?", n, words
    if kind == 6:
        creature = nm.common(5, 8)
        n, words = numbers.draw(10, 48)
        ctx = f"The {creature} is a small burrowing creature of {nm.country()}, and an adult {creature} has {n} legs."
        return ctx, f"How many legs does an adult {creature} have?", n, words
    if kind == 7:
        mountain, range_ = nm.place(), nm.place()
        ctx = f"Mount {mountain} is the highest mountain in the {range_} Range. It lies on the border between {nm.country()} and {nm.country()}."
        return ctx, f"What is the highest mountain in the {range_} Range?", mountain, [f"Mount {mountain}"]
    if kind == 8:
        animal, island = nm.common(5, 8), nm.place()
        ctx = f"The {animal} is the largest animal on the island of {island}. It is a slow grazing mammal that feeds on reeds."
        return ctx, f"What is the largest animal on the island of {island}?", animal, []
    if kind == 9:
        (person, last), desert = nm.person(), nm.place()
        ctx = f"{person} was the first person to cross the {desert} Desert on foot. {rng.choice(_PRONOUNS)} completed the crossing in {rng.randint(1700, 1950)}."
        return ctx, f"Who was the first person to cross the {desert} Desert on foot?", person, [last]
    if kind == 10:
        (person, last), sitter = nm.person(), nm.place()
        ctx = f"The Lady of {sitter} is a portrait painted by {person}. It hangs in the town museum of {nm.place()}."
        return ctx, f"Who painted the Lady of {sitter}?", person, [last]
    if kind == 11:
        (person, last), adj = nm.person(), nm.common(5, 8)
        ctx = f"{person} developed the theory of {adj} resonance. {rng.choice(_PRONOUNS)} published it in {rng.randint(1700, 1950)}."
        return ctx, f"Who developed the theory of {adj} resonance?", person, [last]
    if kind == 12:
        insect, substance, tree = nm.place(), nm.common(5, 8), nm.common(5, 8)
        ctx = f"{insect} beetles make {substance} from the sap of the {tree} tree. They store it in chambers inside fallen logs."
        return ctx, f"What sweet substance do {insect} beetles make from tree sap?", substance, []
    if kind == 13:
        planet = nm.place()
        n, words = numbers.draw(10, 99)
        ctx = f"A day on the planet {planet} is divided into {n} hours. The planet turns slowly on its axis."
        return ctx, f"How many hours are there in a day on the planet {planet}?", n, words
    if kind == 14:
        country = nm.country()
        n, words = numbers.draw(5, 39)
        ctx = f"The traditional coin of {country} is a polygon with {n} sides. It is struck from bronze."
        return ctx, f"How many sides does the traditional coin of {country} have?", n, words
    if kind == 15:
        (person, last), country = nm.person(), nm.country()
        start = rng.randint(1800, 1950)
        ctx = f"{person} was the first president of {country}. {rng.choice(_PRONOUNS)} served from {start} to {start + rng.randint(3, 9)}."
        return ctx, f"Who was the first president of {country}?", person, [last]
    if kind == 16:
        star, planet = nm.place(), nm.place()
        ctx = f"{star} is the star closest to the planet {planet}. It is a small, cool red star."
        return ctx, f"What is the closest star to the planet {planet}?", star, []
    country = nm.country()
    n, words = numbers.draw(5, 39)
    ctx = f"The old calendar of {country} divides the year into {n} months of equal length."
    return ctx, f"How many months are there in a year of the old calendar of {country}?", n, words


_CLEAN_PLAN = _T["clean_plan"]


def _clean_items(rng: random.Random, memorized: list[Record]) -> list[tuple[str, Clean]]:
    texts = [text for item in memorized for text in (item["context"], item["query"], *_accepted(item))]
    namer = _Namer(rng, {word for text in texts for word in _normalise(text).split()})
    numbers = _Numbers(rng, texts)
    out: list[tuple[str, Clean]] = []
    for category, count in _CLEAN_PLAN:
        for i in range(count):
            if category == "capital":
                built = _clean_capital(rng, namer, i)
            elif category == "author":
                built = _clean_author(rng, namer, i)
            elif category == "element":
                built = _clean_element(rng, namer, i, numbers)
            else:
                built = _clean_misc(rng, namer, i, numbers)
            out.append((category, built))
    return out


# ---------------------------------------------------------------------------------------
# The benchmark
# ---------------------------------------------------------------------------------------


def _record(kind: str, index: int, fact_id: str, category: str, clean: Clean) -> Record:
    context, query, answer, aliases = clean
    return {
        "id": f"{_ID_PREFIX[kind]}-{index:03d}",
        "kind": kind,
        "label": LABELS[kind],
        "fact_id": fact_id,
        "category": category,
        "context": context,
        "query": query,
        "answer": answer,
        "aliases": aliases,
    }


def generate_reliance(seed: int = 0) -> list[Record]:
    """All items: 150 memorized, then their 150 paraphrases, then 150 clean items.

    The memorized facts are fixed; ``seed`` chooses the paraphrase wording of the capital,
    author and element questions and every invented name and number of the clean items.
    """
    rng = random.Random(seed)
    facts = _memorized_facts(rng)
    memorized: list[Record] = []
    paraphrased: list[Record] = []
    for i, (category, context, query, para, answer, aliases) in enumerate(facts):
        fact_id = f"fact-{i:03d}"
        memorized.append(_record("memorized", i, fact_id, category, (context, query, answer, list(aliases))))
        paraphrased.append(
            _record("memorized_paraphrased", i, fact_id, category, (context, para, answer, list(aliases)))
        )
    clean = [
        _record("clean", i, f"clean-{i:03d}", category, built)
        for i, (category, built) in enumerate(_clean_items(rng, memorized))
    ]
    return memorized + paraphrased + clean


def write_reliance(folder: str | Path, seed: int = 0) -> Path:
    """Generate the benchmark and write ``context_reliance.jsonl`` into ``folder``; returns its path."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    path = out / RELIANCE_FILE
    path.write_bytes(to_jsonl(generate_reliance(seed)).encode("utf-8"))
    return path


def load_reliance() -> list[Record]:
    """The shipped benchmark (450 records: 150 per kind; label 1 = memorized, 0 = clean)."""
    resource = resources.files("mnemoscope.bench") / "data" / RELIANCE_FILE
    return read_jsonl(resource.read_text(encoding="utf-8"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mnemoscope.bench.reliance",
        description="Regenerate the context-reliance benchmark (memorized, paraphrased and clean items).",
    )
    parser.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="output folder (required: an installed package's own data is never overwritten; in a "
        "checkout, src/mnemoscope/bench/data regenerates the shipped files)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    path = write_reliance(args.out, args.seed)
    records = read_jsonl(path.read_text(encoding="utf-8"))
    counts = Counter((r["kind"], r["category"]) for r in records)
    print(f"{RELIANCE_FILE}: {len(records)} records -> {path}")
    for kind in KINDS:
        per = ", ".join(f"{c} {counts[(kind, c)]}" for c in CATEGORIES)
        print(f"  {kind}: {sum(counts[(kind, c)] for c in CATEGORIES)} ({per})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
