"""Build the shipped calibration set ``src/mnemoscope/bench/data/calibration.jsonl``.

    python benchmarks/data/build_calibration_set.py            # (re)write the shipped file
    python benchmarks/data/build_calibration_set.py --check    # exit 1 if the file is not what this builds

Deterministic: only seeded generators (one per real fact, keyed by its category and subject, so that
editing a row changes no other fact; one for the invented facts) and the hand-written tables of
``benchmarks/data/calibration_tables.py`` are used, and nothing iterates over a set, so the output is
byte-identical on every run and machine. Four kinds of record (docs/data.md):

* ``memorized`` (label 1): a well-known fact from the tables, with a context that states it.
* ``memorized_paraphrased`` (label 1): the same fact (same ``fact_id``, context, answer) asked in
  other words.
* ``clean`` (label 0): a fact about an invented entity (town, person, book, element, species, ...)
  built with the same query/context templates as the real facts of its category, so the surface
  form does not give the label away.
* ``conflict`` (label null): a real fact of difficulty 1 or 2 whose context states a counterfactual
  answer of the same type (``context_answer``); ``answer`` stays the true one. Labelled by which of
  the two answers the model gives (the calibration does that on the model at hand).
"""

# ruff: noqa: SIM905  (word tables read better as one string per table)
from __future__ import annotations

import argparse
import importlib.util
import json
import random
import re
import sys
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
OUT = ROOT / "src" / "mnemoscope" / "bench" / "data" / "calibration.jsonl"
SEED = 27

sys.path.insert(0, str(ROOT / "src"))
from mnemoscope.bench.reliance import answer_matches  # noqa: E402


def _load_tables() -> Any:
    spec = importlib.util.spec_from_file_location("calibration_tables", HERE / "calibration_tables.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


T = _load_tables()

# ---------------------------------------------------------------------------------------
# Templates of the subject-templated categories
# {s} subject, {S} subject capitalised, {a} answer, {A} answer capitalised
# ---------------------------------------------------------------------------------------

Cat = dict[str, Any]

CATEGORIES: dict[str, Cat] = {
    "capital": {
        "table": T.CAPITAL,
        "query": "What is the capital of {s}?",
        "para": [
            "Which city is the capital of {s}?",
            "Name the capital city of {s}.",
            "In which city is the seat of government of {s}?",
            "Which city serves as the capital of {s}?",
        ],
        "ctx": [
            "{A} is the capital of {s}.",
            "The capital of {s} is {A}.",
            "{A} is the capital city of {s} and the seat of its government.",
        ],
    },
    "currency": {
        "table": T.CURRENCY,
        "query": "What is the currency of {s}?",
        "para": [
            "Which currency is used in {s}?",
            "What money do people pay with in {s}?",
            "Name the official currency of {s}.",
        ],
        "ctx": ["The currency of {s} is the {a}.", "In {s}, people pay with the {a}, the official currency."],
    },
    "language": {
        "table": T.LANGUAGE,
        "query": "What is the official language of {s}?",
        "para": [
            "Which language is the official language of {s}?",
            "Name the official language of {s}.",
            "In which language are the laws of {s} officially written?",
        ],
        "ctx": ["The official language of {s} is {A}.", "{A} is the official language of {s}."],
    },
    "continent": {
        "table": T.CONTINENT,
        "query": "On which continent is {s}?",
        "para": ["Which continent is {s} part of?", "In which continent does {s} lie?"],
        "ctx": ["{S} is a country in {A}.", "{S} lies on the continent of {A}."],
    },
    "author": {
        "table": T.AUTHOR,
        "query": "Who wrote {s}?",
        "para": [
            "Who is the author of {s}?",
            "Which writer created {s}?",
            "Name the author of {s}.",
            "Who penned {s}?",
        ],
        "ctx": ["{S} was written by {A}.", "{A} wrote {s}.", "{S} is the work of the writer {A}."],
    },
    "composer": {
        "table": T.COMPOSER,
        "query": "Who composed {s}?",
        "para": ["Which composer wrote {s}?", "Who is the composer of {s}?", "Name the composer of {s}."],
        "ctx": ["{S} was composed by {A}.", "{A} composed {s}."],
    },
    "painter": {
        "table": T.PAINTER,
        "query": "Who painted {s}?",
        "para": [
            "Which artist painted {s}?",
            "Who is the painter of {s}?",
            "Name the artist who painted {s}.",
        ],
        "ctx": ["{S} was painted by {A}.", "{A} painted {s}."],
    },
    "inventor": {
        "table": T.INVENTOR,
        "query": "Who is credited with inventing {s}?",
        "para": ["Who invented {s}?", "Name the inventor of {s}.", "Which inventor is credited with {s}?"],
        "ctx": ["{A} is credited with inventing {s}.", "The invention of {s} is credited to {A}."],
    },
    "discovery": {
        "table": T.DISCOVERY,
        "query": "Who {s}?",
        "para": ["Which scientist {s}?", "Name the scientist who {s}.", "Who was the scientist who {s}?"],
        "ctx": ["{A} {s}.", "It was {A} who {s}."],
    },
    "element_symbol": {
        "table": T.ELEMENT_SYMBOL,
        "query": "What is the chemical symbol for {s}?",
        "para": [
            "Which symbol stands for {s} on the periodic table?",
            "What is the symbol of the element {s}?",
            "How is {s} written as a chemical symbol?",
        ],
        "ctx": ["{S} is a chemical element with the symbol {a}.", "The chemical symbol for {s} is {a}."],
    },
    "element_number": {
        "table": T.ELEMENT_NUMBER,
        "query": "What is the atomic number of {s}?",
        "para": ["How many protons does an atom of {s} have?", "Which atomic number does {s} have?"],
        "ctx": ["{S} has the atomic number {a}.", "The atomic number of {s} is {a}."],
    },
    "landmark_city": {
        "table": T.LANDMARK_CITY,
        "query": "In which city is {s}?",
        "para": [
            "Which city is home to {s}?",
            "Where is {s} located? Name the city.",
            "In what city can you visit {s}?",
        ],
        "ctx": ["{S} is in {A}.", "{S} stands in the city of {A}."],
    },
    "place_country": {
        "table": T.PLACE_COUNTRY,
        "query": "In which country is {s}?",
        "para": [
            "Which country is home to {s}?",
            "Where is {s}? Name the country.",
            "In what country can you visit {s}?",
        ],
        "ctx": ["{S} is in {A}.", "{S} is located in {A}."],
    },
    "river_city": {
        "table": T.RIVER_CITY,
        "query": "Which river flows through {s}?",
        "para": [
            "Which river runs through the city of {s}?",
            "What is the name of the river that flows through {s}?",
        ],
        "ctx": ["The river {A} flows through {s}.", "{S} lies on the river {A}."],
    },
    "film_director": {
        "table": T.FILM_DIRECTOR,
        "query": "Who directed {s}?",
        "para": [
            "Who was the director of {s}?",
            "Which filmmaker directed {s}?",
            "Name the director of {s}.",
        ],
        "ctx": ["{S} was directed by {A}.", "{A} directed {s}."],
    },
    "song_artist": {
        "table": T.SONG_ARTIST,
        "query": "Who recorded {s}?",
        "para": [
            "Which artist recorded {s}?",
            "Who is the original performer of {s}?",
            "Name the artist behind {s}.",
        ],
        "ctx": ["{S} was recorded by {A}.", "{A} recorded {s}."],
    },
    "company_founder": {
        "table": T.COMPANY_FOUNDER,
        "query": "Who founded {s}?",
        "para": ["Who is the founder of {s}?", "Which entrepreneur founded {s}?", "Name the founder of {s}."],
        "ctx": ["{S} was founded by {A}.", "{A} founded {s}."],
    },
    "company_product": {
        "table": T.COMPANY_PRODUCT,
        "query": "Which company makes {s}?",
        "para": [
            "Which company produces {s}?",
            "What company is behind {s}?",
            "Name the company that makes {s}.",
        ],
        "ctx": ["{S} is made by {A}.", "The company {A} makes {s}."],
    },
    "athlete_sport": {
        "table": T.ATHLETE_SPORT,
        "query": "In which sport is {s} famous?",
        "para": [
            "Which sport made {s} famous?",
            "What sport is {s} known for?",
            "Name the sport in which {s} became a star.",
        ],
        "ctx": ["{S} is famous as a star of {a}.", "{S} became world famous in {a}."],
    },
    "world_cup": {
        "table": T.WORLD_CUP,
        "query": "Which country won the {s} FIFA World Cup?",
        "para": [
            "Which national team won the {s} FIFA World Cup?",
            "Who were the champions of the {s} FIFA World Cup?",
        ],
        "ctx": ["{A} won the {s} FIFA World Cup.", "The {s} FIFA World Cup was won by {A}."],
    },
    "olympics_host": {
        "table": T.OLYMPICS_HOST,
        "query": "Which city hosted the {s} Summer Olympics?",
        "para": [
            "Where were the {s} Summer Olympics held? Name the city.",
            "Which city was the host of the {s} Summer Olympic Games?",
        ],
        "ctx": ["{A} hosted the {s} Summer Olympics.", "The {s} Summer Olympics were held in {A}."],
    },
    "unit": {
        "table": T.UNIT_QUANTITY,
        "query": "What is the SI unit of {s}?",
        "para": ["Which SI unit is used to measure {s}?", "In which SI unit is {s} measured?"],
        "ctx": ["The SI unit of {s} is the {a}.", "{S} is measured in the SI unit called the {a}."],
    },
    "body_term": {
        "table": T.BODY_TERM,
        "query": "What is the medical name for the {s}?",
        "para": ["What do doctors call the {s}?", "What is the anatomical term for the {s}?"],
        "ctx": ["The medical name for the {s} is the {a}.", "Doctors call the {s} the {a}."],
    },
}

# Invented clean items get the same templates as the category's real ones; the world cup and the
# Olympics use an invented competition, so their templates take the whole competition as subject.
INVENTED_TEMPLATES: dict[str, Cat] = {
    "world_cup": {
        "query": "Which country won the {s}?",
        "para": ["Which national team won the {s}?", "Who were the champions of the {s}?"],
        "ctx": ["{A} won the {s}.", "The {s} was won by {A}."],
    },
    "olympics_host": {
        "query": "Which city hosted the {s}?",
        "para": ["Where were the {s} held? Name the city.", "Which city was the host of the {s}?"],
        "ctx": ["{A} hosted the {s}.", "The {s} were held in {A}."],
    },
}
for _name in ("world_cup", "olympics_host"):
    CATEGORIES[_name]["invented"] = INVENTED_TEMPLATES[_name]

# Capitals whose government sits in another city (The Hague, Putrajaya): no "seat of government" wording.
SEAT_ELSEWHERE = ("the Netherlands", "Malaysia")

# Difficulty-1/2 facts of these categories get a knowledge-conflict variant (a same-type decoy).
PERSON_CATEGORIES = (
    "author",
    "composer",
    "painter",
    "inventor",
    "discovery",
    "film_director",
    "song_artist",
    "company_founder",
)

# ---------------------------------------------------------------------------------------
# Parsing and helpers
# ---------------------------------------------------------------------------------------

Fact = dict[str, Any]

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def number_words(n: int) -> str:
    if n < 20:
        return _ONES[n]
    tens, ones = divmod(n, 10)
    return _TENS[tens] + (f"-{_ONES[ones]}" if ones else "")


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _fill(template: str, s: str, a: str = "") -> str:
    return template.format(s=s, S=_cap(s), a=a, A=_cap(a))


def slug(text: str, limit: int = 48) -> str:
    plain = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    return re.sub(r"[^a-z0-9]+", "-", plain).strip("-")[:limit].strip("-")


_PARTICLES = ("van", "von", "de", "da", "del", "di", "du", "le", "la")


def surname_alias(name: str) -> list[str]:
    """``["Shakespeare"]`` for "William Shakespeare", ``["van Gogh"]`` for "Vincent van Gogh"."""
    words = name.split()
    if len(words) < 2 or " and " in name or words[0].lower() == "the":
        return []
    last = words[-1]
    if last.rstrip(".") in ("II", "III", "Jr", "Sr") or len(last) < 3:
        return []
    if words[-2].lower() in _PARTICLES:
        return [f"{words[-2]} {last}"]
    return [last]


def numeric_aliases(answer: str) -> list[str]:
    if answer.isdigit() and int(answer) < 100:
        return [number_words(int(answer))]
    return []


def _row(line: str, n_fields: int) -> list[str]:
    parts = [p.strip() for p in line.split("|")]
    return parts + [""] * (n_fields - len(parts))


def parse_table(text: str) -> list[tuple[str, str, int, list[str], str]]:
    rows = []
    for line in text.strip().splitlines():
        subject, answer, difficulty, aliases, decoy = _row(line, 5)[:5]
        alias_list = [a.strip() for a in aliases.split(";") if a.strip()]
        rows.append((subject, answer, int(difficulty), alias_list, decoy))
    return rows


def parse_free(text: str) -> list[tuple[str, str, str, str, int, list[str], str]]:
    rows = []
    for line in text.strip().splitlines():
        query, para, ctx, answer, difficulty, aliases, decoy = _row(line, 7)[:7]
        alias_list = [a.strip() for a in aliases.split(";") if a.strip()]
        rows.append((query, para, ctx, answer, int(difficulty), alias_list, decoy))
    return rows


def _dedupe(items: list[str], answer: str) -> list[str]:
    out: list[str] = []
    for x in items:
        if x and x != answer and x not in out:
            out.append(x)
    return out


def _item(answer: str, aliases: list[str]) -> dict[str, Any]:
    return {"answer": answer, "aliases": aliases}


# ---------------------------------------------------------------------------------------
# Real facts
# ---------------------------------------------------------------------------------------


def fact_rng(*key: str) -> random.Random:
    """A generator of its own for one fact, so that editing one row of the tables changes no other."""
    return random.Random(":".join((str(SEED), *key)))


def real_facts() -> list[Fact]:
    facts: list[Fact] = []
    for category, cat in CATEGORIES.items():
        for subject, answer, difficulty, aliases, decoy in parse_table(cat["table"]):
            rng = fact_rng(category, subject)
            extra = surname_alias(answer) if category in PERSON_CATEGORIES else []
            ctxs, paras = cat["ctx"], cat["para"]
            if category == "capital" and subject in SEAT_ELSEWHERE:
                ctxs = [t for t in ctxs if "seat" not in t]
                paras = [t for t in paras if "seat" not in t]
            ctx_t = ctxs[rng.randrange(len(ctxs))]
            facts.append(
                {
                    "category": category,
                    "subject": subject,
                    "answer": answer,
                    "aliases": _dedupe([*aliases, *extra, *numeric_aliases(answer)], answer),
                    "difficulty": difficulty,
                    "query": _fill(cat["query"], subject),
                    "paraphrase": _fill(paras[rng.randrange(len(paras))], subject),
                    "ctx_template": ctx_t,
                    "context": _fill(ctx_t, subject, answer),
                    "decoy": decoy,
                }
            )
    for category, text in T.FREE.items():
        for query, para, ctx, answer, difficulty, aliases, decoy in parse_free(text):
            facts.append(
                {
                    "category": category,
                    "subject": query,
                    "answer": answer,
                    "aliases": _dedupe([*aliases, *numeric_aliases(answer)], answer),
                    "difficulty": difficulty,
                    "query": query,
                    "paraphrase": para,
                    "ctx_template": ctx,
                    "context": ctx.format(a=answer, A=_cap(answer)),
                    "decoy": decoy,
                    "free": True,
                }
            )
    return facts


# ---------------------------------------------------------------------------------------
# Invented entities
# ---------------------------------------------------------------------------------------

ONSETS = "b br c ch d dr f g gr h j k l m n p pr r s sk st t tr v w z th sh kl".split()
NUCLEI = "a e i o u a e o ai ei ou".split()
CODAS = "n r l s th m nd rk lt v x rn sk".split()
CODAS_MID = ["", "", "", "n", "r", "l", "s"]
COUNTRY_ENDINGS = "ia ania istan ora and eth oria ovia".split()
FIRST_ENDINGS = "a o en in ia el us is an".split()
ELEMENT_ENDINGS = "ium on ine ite".split()
LANGUAGE_ENDINGS = "ese ic ish i an".split()
# Words (and pieces of words) an invented name must not be or contain.
BLOCKED = (
    "ass bitch cock cum dick fag fuck gay hell nazi nig piss porn rape sex shit slut tit wank whore "
    "kill dead death god jesus allah satan hitler"
).split()
COMMON_WORDS = (
    "baron melon tandem salon canon lemon demon talon venom siren token riven haven raven seven "
    "sorrel morel tinder linen linden tundra sonata santa cobra zebra hydra drama mantra lotus "
    "virus focus bonus sinus torus corpus venus pluto mars terra luna sol nova stella mira "
    "vega rigel orion lyra nile rhine volga seine danube padres madres"
).split()

TITLE_NOUNS = (
    "Orchard Lantern Harbour Mirror Garden Winter Bridge Tide Crown River Clock Lighthouse Meadow "
    "Tower Island Salt Feather Compass Orchid Stone"
).split()
TITLE_ADJS = (
    "Silent Glass Last Hidden Copper Silver Distant Broken Quiet Burning Amber Hollow Northern".split()
)
SEASONS = "Spring Summer Autumn Winter".split()
WORK_KINDS = ("the novel", "the novel", "the novel", "the play", "the poetry collection", "the novella")
MUSIC_KINDS = ("the opera", "the ballet", "the symphony", "the suite", "the oratorio", "the piano piece")
INVENTIONS = (
    "the {c} loom",
    "the {c} lamp",
    "the {P} engine",
    "the {c}scope",
    "the {P} press",
    "the {c} valve",
    "the {P} cipher machine",
    "the {c} pump",
)
DISCOVERIES = (
    "discovered the mineral {c}ite",
    "discovered the element {e}",
    "formulated the {P} principle",
    "proposed the {P} hypothesis",
    "discovered the {c} bacterium",
    "described the {P} effect",
    "discovered the {P} comet",
)
LANDMARKS = (
    "the {P} Tower",
    "the {P} Cathedral",
    "the {P} Palace",
    "the {P} Gate",
    "the {P} Museum",
    "the {P} Bridge",
)
PLACES = (
    "the old fortress of {P}",
    "Mount {P}",
    "Lake {P}",
    "the {P} Desert",
    "the {P} National Park",
    "the town of {P}",
)
COMPANIES = ("{P} Systems", "{P} Motors", "{P} Airlines", "{P} Foods", "{P} Robotics", "{P} Pharmaceuticals")
PRODUCTS = (
    "the {P} game console",
    "the {P} electric car",
    "the {P} laptops",
    "the {P} smartphones",
    "the {P} sports car",
    "the {P} e-reader",
)
SONGS = ("the song {T}", "the album {T}", "the song {P} Nights", "the album Songs from {P}")
FILMS = ("the film {T}", "the film {P}", "the film The {A} {N}")
PAINTINGS = ("The {A} {N}", "{N} at {P}", "The {N} of {P}", "View of {P}")
QUANTITIES = ("{c} flux", "{c} density", "{c} potential", "{c} strength")


class Namer:
    """Pronounceable invented names: never twice, never a real answer/subject or a common word."""

    def __init__(self, rng: random.Random, reserved: list[str]) -> None:
        self.rng = rng
        self.used: dict[str, None] = {}
        for text in reserved:
            for word in re.findall(r"[a-z]+", unicodedata.normalize("NFKD", text).lower()):
                self.used[word] = None
        for word in COMMON_WORDS:
            self.used[word] = None

    def _syl(self, count: int) -> str:
        parts = []
        for i in range(count):
            onset = "" if i == 0 and self.rng.random() < 0.15 else self.rng.choice(ONSETS)
            coda = self.rng.choice(CODAS) if i == count - 1 else self.rng.choice(CODAS_MID)
            parts.append(onset + self.rng.choice(NUCLEI) + coda)
        return "".join(parts)

    def _fresh(self, make: Callable[[], str], lo: int = 5, hi: int = 9) -> str:
        while True:
            word = make()
            low = word.lower()
            if lo <= len(word) <= hi and low not in self.used and not any(b in low for b in BLOCKED):
                self.used[low] = None
                return word

    def place(self) -> str:
        return self._fresh(lambda: self._syl(3 if self.rng.random() < 0.25 else 2).capitalize())

    def country(self) -> str:
        return self._fresh(
            lambda: (self._syl(self.rng.randint(1, 2)) + self.rng.choice(COUNTRY_ENDINGS)).capitalize(), hi=11
        )

    def person(self) -> str:
        first = self._fresh(
            lambda: (self._syl(self.rng.randint(1, 2)) + self.rng.choice(FIRST_ENDINGS)).capitalize(), lo=4
        )
        return f"{first} {self.place()}"

    def common(self, lo: int = 4, hi: int = 8) -> str:
        return self._fresh(lambda: self._syl(self.rng.randint(1, 2)), lo=lo, hi=hi)

    def element(self) -> str:
        return self._fresh(
            lambda: self._syl(self.rng.randint(1, 2)) + self.rng.choice(ELEMENT_ENDINGS), hi=11
        )

    def title(self) -> str:
        r = self.rng
        forms = (
            lambda: f"The {r.choice(TITLE_NOUNS)} of {self.place()}",
            lambda: f"{self.place()} in {r.choice(SEASONS)}",
            lambda: f"The {r.choice(TITLE_ADJS)} {r.choice(TITLE_NOUNS)} of {self.place()}",
            lambda: f"A {r.choice(SEASONS)} in {self.place()}",
        )
        return forms[r.randrange(len(forms))]()

    def pattern(self, template: str) -> str:
        r = self.rng
        return template.format(
            P=self.place(),
            c=self.common(),
            e=self.element(),
            T=self.title(),
            A=r.choice(TITLE_ADJS),
            N=r.choice(TITLE_NOUNS),
        )


REAL_SYMBOLS = (
    "H He Li Be B C N O F Ne Na Mg Al Si P S Cl Ar K Ca Sc Ti V Cr Mn Fe Co Ni Cu Zn Ga Ge As Se Br Kr Rb Sr "
    "Y Zr Nb Mo Tc Ru Rh Pd Ag Cd In Sn Sb Te I Xe Cs Ba La Ce Pr Nd Pm Sm Eu Gd Tb Dy Ho Er Tm Yb Lu Hf "
    "Ta W Re Os Ir Pt Au Hg Tl Pb Bi Po At Rn Fr Ra Ac Th Pa U Np Pu Am Cm Bk Cf Es Fm Md No Lr Rf Db Sg "
    "Bh Hs Mt Ds Rg Cn Nh Fl Mc Lv Ts Og"
).split()
TWO_LETTER_WORDS = (
    "ad ah am an as at ax be by do dr eh em en go ha he hi id if in is it jr lb lo ma me mm mr ms mu my no "
    "nt of oh oi ok on or ox pa pc pi pm re rd sr st so th to tv uh um un up ur us vs we yo ye"
).split()


class Numbers:
    """Arbitrary numbers, unused, and not the answer of any real fact (as digits or words)."""

    def __init__(self, rng: random.Random, real_answers: list[str]) -> None:
        self.rng = rng
        self.used: dict[int, None] = {int(a): None for a in real_answers if a.isdigit()}

    def draw(self, lo: int, hi: int) -> str:
        choices = [n for n in range(lo, hi + 1) if n not in self.used]
        n = self.rng.choice(choices)
        self.used[n] = None
        return str(n)


def _symbol(nm: Namer, name: str) -> str | None:
    for letter in name[2:]:
        sym = name[0].upper() + letter.lower()
        low = sym.lower()
        if letter in "aeiouy" or low == name[:2] or low in nm.used or sym in REAL_SYMBOLS:
            continue
        if low in TWO_LETTER_WORDS:
            continue
        nm.used[low] = None
        return sym
    return None


# A clean maker returns (subject, answer) for a templated category.
def templated_maker(category: str, nm: Namer, nums: Numbers) -> Callable[[], tuple[str, str]] | None:
    r = nm.rng
    pick = r.choice
    makers: dict[str, Callable[[], tuple[str, str]]] = {
        "capital": lambda: (nm.country(), nm.place()),
        "currency": lambda: (nm.country(), nm.common()),
        "language": lambda: (nm.country(), nm.place()[:-1] + pick(LANGUAGE_ENDINGS)),
        "author": lambda: (f"{pick(WORK_KINDS)} {nm.title()}", nm.person()),
        "composer": lambda: (f"{pick(MUSIC_KINDS)} {nm.title()}", nm.person()),
        "painter": lambda: (nm.pattern(pick(PAINTINGS)), nm.person()),
        "inventor": lambda: (nm.pattern(pick(INVENTIONS)), nm.person()),
        "discovery": lambda: (nm.pattern(pick(DISCOVERIES)), nm.person()),
        "element_number": lambda: (nm.element(), nums.draw(119, 199)),
        "landmark_city": lambda: (nm.pattern(pick(LANDMARKS)), nm.place()),
        "place_country": lambda: (nm.pattern(pick(PLACES)), nm.country()),
        "river_city": lambda: (nm.place(), nm.place()),
        "film_director": lambda: (nm.pattern(pick(FILMS)), nm.person()),
        "song_artist": lambda: (nm.pattern(pick(SONGS)), nm.person()),
        "company_founder": lambda: (nm.pattern(pick(COMPANIES)), nm.person()),
        "company_product": lambda: (nm.pattern(pick(PRODUCTS)), nm.place()),
        "athlete_sport": lambda: (nm.person(), nm.common(4, 6) + "ball"),
        "world_cup": lambda: (f"{r.randint(1905, 1995)} {nm.place()} Cup", nm.country()),
        "olympics_host": lambda: (f"{r.randint(1905, 1995)} {nm.place()} Games", nm.place()),
    }
    if category == "element_symbol":

        def element_symbol() -> tuple[str, str]:
            while True:
                name = nm.element()
                sym = _symbol(nm, name)
                if sym is not None:
                    return name, sym

        return element_symbol
    return makers.get(category)


# Free-form invented facts: (query, paraphrase, context with {a}/{A}, answer kind).
# Kinds: place, person, common, num:lo:hi, year
FREE_INVENTED: dict[str, list[tuple[str, str, str, str]]] = {
    "astronomy": [
        (
            "What is the largest moon of the planet {P}?",
            "Which of the moons of {P} is the biggest?",
            "{A} is the largest moon of the planet {P}.",
            "place",
        ),
        (
            "How many moons does the planet {P} have?",
            "What is the number of moons orbiting the planet {P}?",
            "The planet {P} has {a} moons.",
            "num:13:97",
        ),
        (
            "Who discovered the comet {P}?",
            "Which astronomer first observed the comet {P}?",
            "{A} discovered the comet {P}.",
            "person",
        ),
        (
            "What is the brightest star in the constellation {P}?",
            "Which star shines most brightly in the constellation {P}?",
            "{A} is the brightest star in the constellation {P}.",
            "place",
        ),
        (
            "Who was the first astronaut from {C} to travel into space?",
            "Which astronaut was the first from {C} in space?",
            "{A} was the first astronaut from {C} to travel into space.",
            "person",
        ),
    ],
    "animals": [
        (
            "How many legs does the {c} have?",
            "What is the number of legs of the {c}?",
            "The {c} has {a} legs.",
            "num:13:97",
        ),
        (
            "What does the {c} mainly eat?",
            "What is the main food of the {c}?",
            "The {c} mainly eats {a}.",
            "common",
        ),
        (
            "What is a baby {c} called?",
            "What name is given to a young {c}?",
            "A baby {c} is called a {a}.",
            "common",
        ),
        (
            "What is the national animal of {C}?",
            "Which animal is the national symbol of {C}?",
            "The {a} is the national animal of {C}.",
            "common",
        ),
        (
            "What is the largest bird of {C}?",
            "Which bird is the biggest in {C}?",
            "The {a} is the largest bird of {C}.",
            "common",
        ),
    ],
    "human_body": [
        (
            "Which gland of the {c} produces the hormone {k}?",
            "Which gland makes the hormone {k} in the {c}?",
            "The hormone {k} is produced by the {a} gland of the {c}.",
            "common",
        ),
        (
            "How many bones are in the skeleton of the {c}?",
            "What is the number of bones in a {c} skeleton?",
            "The skeleton of the {c} has {a} bones.",
            "num:101:499",
        ),
    ],
    "geography": [
        (
            "What is the highest mountain in {C}?",
            "Which mountain is the tallest in {C}?",
            "Mount {A} is the highest mountain in {C}.",
            "place",
        ),
        (
            "What is the longest river in {C}?",
            "Which river in {C} is the longest?",
            "The {A} is the longest river in {C}.",
            "place",
        ),
        (
            "What is the largest lake in {C}?",
            "Which lake is the biggest in {C}?",
            "Lake {A} is the largest lake in {C}.",
            "place",
        ),
        (
            "What is the largest island of {C}?",
            "Which island of {C} is the biggest?",
            "{A} is the largest island of {C}.",
            "place",
        ),
        (
            "What is the capital of the province of {P}?",
            "Which city is the capital of the province of {P}?",
            "{A} is the capital of the province of {P}.",
            "place",
        ),
    ],
    "history": [
        (
            "In which year did the {P} War end?",
            "What year did the {P} War come to an end?",
            "The {P} War ended in {a}.",
            "year",
        ),
        (
            "In which year was the Treaty of {P} signed?",
            "What year was the Treaty of {P} concluded?",
            "The Treaty of {P} was signed in {a}.",
            "year",
        ),
        (
            "In which year was the city of {P} founded?",
            "What year was the city of {P} established?",
            "The city of {P} was founded in {a}.",
            "year",
        ),
        (
            "In which year did the {P} Revolution begin?",
            "What year did the {P} Revolution start?",
            "The {P} Revolution began in {a}.",
            "year",
        ),
        (
            "Who was the first President of {C}?",
            "Which man served as the first president of {C}?",
            "{A} was the first President of {C}.",
            "person",
        ),
        (
            "Who founded the city of {P}?",
            "Which leader founded the city of {P}?",
            "{A} founded the city of {P}.",
            "person",
        ),
        (
            "Who was the first person to climb Mount {P}?",
            "Which climber first reached the summit of Mount {P}?",
            "{A} was the first person to climb Mount {P}.",
            "person",
        ),
    ],
    "sports": [
        (
            "How many players does a {c}ball team have on the field?",
            "How many players from one {c}ball team are on the field at a time?",
            "A {c}ball team has {a} players on the field.",
            "num:13:40",
        ),
        (
            "In which sport is the {P} Cup awarded?",
            "Which sport's champions win the {P} Cup?",
            "The {P} Cup is awarded in {a}.",
            "sport",
        ),
        (
            "Who won the {P} Marathon in {Y}?",
            "Which runner was the winner of the {P} Marathon in {Y}?",
            "{A} won the {P} Marathon in {Y}.",
            "person",
        ),
    ],
    "math_units": [
        (
            "How many {c}s are in a {k}?",
            "What is the number of {c}s in one {k}?",
            "There are {a} {c}s in a {k}.",
            "num:13:97",
        ),
        (
            "At what temperature in degrees Celsius does {k}ine boil?",
            "What is the boiling point of {k}ine in degrees Celsius?",
            "{K}ine boils at {a} degrees Celsius.",
            "num:113:987",
        ),
        (
            "What is the value of the {P} constant to two decimal places?",
            "What is the {P} constant rounded to two decimal places?",
            "The value of the {P} constant to two decimal places is {a}.",
            "decimal",
        ),
    ],
}

# Clean items per category (about the share of the category's real facts, at least 4).
CLEAN_COUNTS: dict[str, int] = {
    "capital": 55,
    "currency": 22,
    "language": 16,
    "author": 50,
    "composer": 18,
    "painter": 18,
    "inventor": 12,
    "discovery": 16,
    "element_symbol": 22,
    "element_number": 8,
    "landmark_city": 20,
    "place_country": 20,
    "river_city": 16,
    "film_director": 16,
    "song_artist": 14,
    "company_founder": 12,
    "company_product": 12,
    "athlete_sport": 12,
    "world_cup": 5,
    "olympics_host": 6,
    "astronomy": 12,
    "animals": 20,
    "human_body": 6,
    "geography": 16,
    "history": 28,
    "sports": 10,
    "math_units": 16,
}


def invented_facts(rng: random.Random, real: list[Fact]) -> list[Fact]:
    reserved = [x for f in real for x in (f["answer"], *f["aliases"], f["subject"])]
    nm = Namer(rng, reserved)
    nums = Numbers(rng, [f["answer"] for f in real] + [a for f in real for a in f["aliases"]])
    out: list[Fact] = []
    for category, count in CLEAN_COUNTS.items():
        for i in range(count):
            if category in CATEGORIES:
                cat = CATEGORIES[category].get("invented", CATEGORIES[category])
                maker = templated_maker(category, nm, nums)
                assert maker is not None, category
                subject, answer = maker()
                query = _fill(cat["query"], subject)
                para = _fill(cat["para"][rng.randrange(len(cat["para"]))], subject)
                context = _fill(cat["ctx"][rng.randrange(len(cat["ctx"]))], subject, answer)
            else:
                shapes = FREE_INVENTED[category]
                q, p, c, kind = shapes[i % len(shapes)]
                year = str(rng.randint(1105, 1985))
                k = nm.common()
                names = {
                    "P": nm.place(),
                    "C": nm.country(),
                    "c": nm.common(),
                    "k": k,
                    "K": _cap(k),
                    "Y": year,
                }
                if kind == "place":
                    answer = nm.place()
                elif kind == "person":
                    answer = nm.person()
                elif kind == "common":
                    answer = nm.common()
                elif kind == "sport":
                    answer = nm.common(4, 6) + "ball"
                elif kind == "year":
                    answer = nums.draw(1105, 1985)
                elif kind == "decimal":
                    answer = f"{rng.randint(2, 9)}.{rng.randint(11, 99)}"
                else:
                    _, lo, hi = kind.split(":")
                    answer = nums.draw(int(lo), int(hi))
                query, para = q.format(**names), p.format(**names)
                context = c.format(**names, a=answer, A=_cap(answer))
                subject = query
            out.append(
                {
                    "category": category,
                    "subject": subject,
                    "answer": answer,
                    "aliases": numeric_aliases(answer),
                    "query": query,
                    "paraphrase": para,
                    "context": context,
                }
            )
    return out


# ---------------------------------------------------------------------------------------
# Knowledge conflicts
# ---------------------------------------------------------------------------------------


def _nearby_number(rng: random.Random, answer: str, avoid: list[str]) -> str:
    n = int(answer)
    if n >= 1000:  # a year or a big number: a few years/units off
        deltas = [d for d in range(-9, 10) if d not in (0,)]
    elif n >= 20:
        deltas = [d for d in range(-max(2, n // 5), max(2, n // 5) + 1) if d]
    else:
        deltas = [d for d in (-2, -1, 1, 2, 3) if n + d > 0]
    rng.shuffle(deltas)
    for d in deltas:
        cand = str(n + d)
        if cand not in avoid:
            return cand
    return str(n + 11)


def conflict_items(real: list[Fact]) -> list[Fact]:
    by_cat: dict[str, list[str]] = {}
    for f in real:
        by_cat.setdefault(f["category"], [])
        if f["answer"] not in by_cat[f["category"]]:
            by_cat[f["category"]].append(f["answer"])
    out: list[Fact] = []
    for f in real:
        if f["difficulty"] > 2 or (f["difficulty"] == 2 and not f["decoy"]):
            continue  # difficulty 1, and difficulty 2 where the tables name a same-type decoy
        rng = fact_rng("conflict", f["category"], f["subject"])
        truth = {"answer": f["answer"], "aliases": f["aliases"]}
        candidates: list[str] = []
        if f["decoy"]:
            candidates.append(f["decoy"])
        elif f["answer"].isdigit():
            candidates.append(_nearby_number(rng, f["answer"], [f["answer"], *f["aliases"]]))
        elif f.get("free"):
            continue  # free-form facts without a decoy: no same-type answer to draw
        else:
            pool = [a for a in by_cat[f["category"]] if a != f["answer"]]
            rng.shuffle(pool)
            candidates.extend(pool)
        for decoy in candidates:
            context = f["ctx_template"].format(s=f["subject"], S=_cap(f["subject"]), a=decoy, A=_cap(decoy))
            decoy_item = _item(decoy, numeric_aliases(decoy))
            if answer_matches(context, truth) or not answer_matches(context, decoy_item):
                continue
            if answer_matches(decoy, truth) or answer_matches(f["answer"], decoy_item):
                continue
            out.append(
                {**f, "context": context, "context_answer": decoy, "context_aliases": decoy_item["aliases"]}
            )
            break
    return out


# ---------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------


def build_records(seed: int = SEED) -> list[dict[str, Any]]:
    real = real_facts()
    clean = invented_facts(random.Random(seed), real)
    conflicts = conflict_items(real)

    fact_ids: dict[int, str] = {}
    seen: dict[str, int] = {}
    for f in real:
        base = f"{f['category']}-{slug(f['subject'])}"
        seen[base] = seen.get(base, 0) + 1
        fact_ids[id(f)] = base if seen[base] == 1 else f"{base}-{seen[base]}"
    by_subject = {(f["category"], f["subject"]): fact_ids[id(f)] for f in real}

    def record(
        rid: str, fact_id: str, kind: str, label: int | None, f: Fact, query: str, **extra: Any
    ) -> dict[str, Any]:
        return {
            "id": rid,
            "fact_id": fact_id,
            "kind": kind,
            "label": label,
            "category": f["category"],
            "difficulty": f.get("difficulty"),
            "subject": f["subject"],
            "context": f["context"],
            "query": query,
            "answer": f["answer"],
            "aliases": f["aliases"],
            **extra,
        }

    rows = []
    for f in real:
        fid = fact_ids[id(f)]
        rows.append(record(f"cal-mem-{fid}", f"cal-{fid}", "memorized", 1, f, f["query"]))
        rows.append(record(f"cal-para-{fid}", f"cal-{fid}", "memorized_paraphrased", 1, f, f["paraphrase"]))
    counters: dict[str, int] = {}
    for f in clean:
        counters[f["category"]] = counters.get(f["category"], 0) + 1
        fid = f"inv-{f['category']}-{counters[f['category']]:03d}"
        rows.append(record(f"cal-clean-{fid}", f"cal-{fid}", "clean", 0, f, f["query"]))
    for f in conflicts:
        fid = by_subject[(f["category"], f["subject"])]
        rows.append(
            record(
                f"cal-conf-{fid}",
                f"cal-{fid}",
                "conflict",
                None,
                f,
                f["query"],
                context_answer=f["context_answer"],
                context_aliases=f["context_aliases"],
            )
        )
    return rows


def dumps(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    args = ap.parse_args(argv)
    text = dumps(build_records())
    if args.check:
        same = args.out.exists() and args.out.read_text(encoding="utf-8") == text
        print("up to date" if same else f"{args.out} differs from what the tables build")
        return 0 if same else 1
    args.out.write_text(text, encoding="utf-8")
    rows = [json.loads(x) for x in text.splitlines()]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["kind"]] = counts.get(r["kind"], 0) + 1
    print(f"wrote {args.out}: {len(rows)} records {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
