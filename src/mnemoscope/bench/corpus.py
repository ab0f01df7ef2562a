"""Authored benchmark corpora with known ground truth, generated offline and deterministically.

Three corpora are written by this module from its own templates and word lists (no public
dataset text is used):

* **membership** - 300 fictional encyclopedia paragraphs, 60 in each of five genres
  (places, species, companies, people, events), about 100-130 tokens each under the
  default model's tokenizer. Every name is invented from syllable tables. A seeded split
  marks exactly half of each genre as members (label 1: used for fine-tuning) and half as
  non-members (label 0).
* **arithmetic** - 400 GSM8K-style word problems (2-4 steps) whose integer answers are
  computed by the code; each worked solution states every step as an equation
  (``4 * 3 = 12``) and ends with ``The answer is N.``
* **filler** - 1200 short neutral paragraphs (how-to notes, weather diaries, recipes,
  everyday objects, garden notes, walks) for contamination fine-tuning.

Only ``random.Random(seed)`` instances are used (never the global generator, never set
iteration order), so the output is byte-identical on every run and Python >= 3.10.
The shipped files are regenerated with::

    python -m mnemoscope.bench.corpus --out src/mnemoscope/bench/data

Example:
    >>> from mnemoscope.bench.corpus import load_membership
    >>> docs = load_membership()
    >>> len(docs), sum(d["label"] for d in docs)
    (300, 150)
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from mnemoscope.bench.tables import load_tables

_T = load_tables("corpus_tables.json")

__all__ = [
    "ARITHMETIC_FILE",
    "ARITHMETIC_KINDS",
    "FILLER_FILE",
    "FILLER_KINDS",
    "GENRES",
    "MEMBERSHIP_FILE",
    "SUBTYPES",
    "NameFactory",
    "estimate_tokens",
    "generate_arithmetic",
    "generate_filler",
    "generate_membership",
    "load_arithmetic",
    "load_filler",
    "load_membership",
    "main",
    "read_jsonl",
    "to_jsonl",
    "write_all",
]

MEMBERSHIP_FILE = "membership.jsonl"
ARITHMETIC_FILE = "arithmetic.jsonl"
FILLER_FILE = "filler.jsonl"

GENRES = ("place", "species", "company", "person", "event")
DOCS_PER_GENRE = 60
ARITHMETIC_KINDS = ("shopping", "travel", "sharing", "rate", "percent")
FILLER_KINDS = ("howto", "weather", "recipe", "object", "garden", "walk")

# Length bands in estimated tokens (see estimate_tokens). Calibrated against the SmolLM2
# tokenizer so that the real counts land in 100-130 (membership) and 60-120 (filler).
MEMBERSHIP_BAND = (106, 118)
FILLER_BAND = (72, 104)

Facts = dict[str, str]


# ---------------------------------------------------------------------------------------
# Length estimate (no tokenizer needed at generation time)
# ---------------------------------------------------------------------------------------

_PIECE = re.compile(r"[A-Za-z]+|\d|[^\sA-Za-z\d]")
_COMMON_CAPITALISED = frozenset(
    [
        "the",
        "it",
        "its",
        "in",
        "a",
        "an",
        "at",
        "by",
        "on",
        "of",
        "to",
        "under",
        "his",
        "her",
        "he",
        "she",
        "they",
        "their",
        "after",
        "every",
        "each",
        "since",
        "during",
        "local",
        "according",
        "only",
        "about",
        "over",
        "some",
        "most",
        "this",
        "from",
        "with",
        "as",
        "adults",
        "traditional",
        "villagers",
        "parish",
        "barges",
        "historians",
        "critics",
        "relief",
        "tide",
        "ruins",
        "surveys",
        "breeding",
        "wind",
        "wind",
        "speeds",
        "annual",
        "first",
        "then",
        "when",
        "once",
        "mix",
        "serve",
        "cut",
        "add",
        "keep",
        "put",
        "leave",
        "stir",
        "bring",
        "use",
        "wash",
        "place",
        "start",
        "check",
        "note",
        "today",
        "tomorrow",
        "yesterday",
        "morning",
        "evening",
        "afternoon",
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
        "saint",
        "mount",
        "island",
        "islands",
        "river",
        "sea",
        "hill",
        "lane",
        "street",
        "road",
        "square",
        "institute",
        "society",
        "festival",
        "treaty",
        "accord",
        "great",
        "storm",
        "gale",
        "flood",
        "feast",
        "night",
        "works",
        "mills",
        "lines",
        "trading",
        "company",
        "brothers",
        "daughters",
        "instruments",
        "manufacturing",
        "shipping",
        "carriers",
        "cooperative",
        "merchants",
        "house",
        "on",
        "what",
        "how",
    ]
)


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate of the SmolLM2 token count of ``text``.

    Digits are single tokens (plus one for the space before a number), common words are one
    token, and capitalised words that are not common (the invented names) cost about 0.45
    token per letter. Good to about +-8 % on this module's texts.
    """
    total = 0.0
    for m in _PIECE.finditer(text):
        piece = m.group(0)
        if piece.isdigit():
            total += 1
            if m.start() > 0 and text[m.start() - 1] == " ":
                total += 1
        elif piece.isalpha():
            if piece[0].isupper() and piece.lower() not in _COMMON_CAPITALISED:
                total += max(1.0, 0.45 * len(piece))
            elif len(piece) > 9:
                total += 2
            else:
                total += 1
        else:
            total += 1
    return round(total)


# ---------------------------------------------------------------------------------------
# Invented names
# ---------------------------------------------------------------------------------------

_ONSETS = _T["onsets"]
_NUCLEI = _T["nuclei"]
_CODAS = _T["codas"]
_FIRST_ENDINGS = _T["first_endings"]
_GENUS_ENDINGS = _T["genus_endings"]
_EPITHET_ENDINGS = _T["epithet_endings"]
_BLOCKED = _T["blocked"]


class NameFactory:
    """Invents pronounceable names; never returns the same name twice in one corpus."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def _syllables(self, rng: random.Random, count: int) -> str:
        parts = []
        for i in range(count):
            onset = rng.choice(_ONSETS)
            if i == 0 and rng.random() < 0.2:
                onset = ""
            coda = rng.choice(_CODAS) if i == count - 1 else rng.choice(("", "", "n", "r", "l", "s"))
            parts.append(onset + rng.choice(_NUCLEI) + coda)
        return "".join(parts)

    def _fresh(self, rng: random.Random, make: Callable[[], str]) -> str:
        while True:
            word = make()
            low = word.lower()
            if 4 <= len(word) <= 10 and low not in self.used and not any(b in low for b in _BLOCKED):
                self.used.add(low)
                return word

    def word(self, rng: random.Random, lo: int = 2, hi: int = 3) -> str:
        """A capitalised place-like name of ``lo``-``hi`` syllables."""
        return self._fresh(rng, lambda: self._syllables(rng, rng.randint(lo, hi)).capitalize())

    def first(self, rng: random.Random) -> str:
        return self._fresh(
            rng, lambda: (self._syllables(rng, rng.randint(1, 2)) + rng.choice(_FIRST_ENDINGS)).capitalize()
        )

    def person(self, rng: random.Random) -> str:
        return f"{self.first(rng)} {self.word(rng, 2, 3)}"

    def genus(self, rng: random.Random) -> str:
        return self._fresh(
            rng, lambda: (self._syllables(rng, rng.randint(1, 2)) + rng.choice(_GENUS_ENDINGS)).capitalize()
        )

    def epithet(self, rng: random.Random) -> str:
        return self._fresh(rng, lambda: self._syllables(rng, 2) + rng.choice(_EPITHET_ENDINGS))


# ---------------------------------------------------------------------------------------
# Shared word lists
# ---------------------------------------------------------------------------------------

MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
_DIRECTIONS = _T["directions"]
_OCCUPATIONS = _T["occupations"]
_INDUSTRIES = _T["industries"]
_GOODS = _T["goods"]
_LANDMARKS = _T["landmarks"]
_BUILDINGS = _T["buildings"]
_ANIMALS_HERALDIC = _T["animals_heraldic"]
_OBJECTS_HERALDIC = _T["objects_heraldic"]
_FAIR_GOODS = _T["fair_goods"]
_FISH = _T["fish"]
_BIRDS = _T["birds"]
_CARGO = _T["cargo"]
_COLOURS = _T["colours"]
_MINERALS = _T["minerals"]
_ISLAND_TRADES = _T["island_trades"]
_SEA_WORDS = _T["sea_words"]
_FIELDS = _T["fields"]
_TOPICS = _T["topics"]
_ARTS = _T["arts"]
_TITLE_NOUNS = _T["title_nouns"]
_TITLE_ADJS = _T["title_adjs"]
_FEATURES = _T["features"]
_KIN = _T["kin"]
_PARENT_JOBS = _T["parent_jobs"]
_PRODUCTS = _T["products"]
_TRADE_GOODS = _T["trade_goods"]
_VEHICLES = _T["vehicles"]
_EMBLEMS = _T["emblems"]
_SOILS = _T["soils"]
_LEAVES = _T["leaves"]
_EDGES = _T["edges"]
_POLLINATORS = _T["pollinators"]
_DISPERSERS = _T["dispersers"]
_AILMENTS = _T["ailments"]
_STATUSES = _T["statuses"]
_ANIMAL_CLASSES = _T["animal_classes"]
_ANIMAL_NOUNS = _T["animal_nouns"]
_FOODS = _T["foods"]
_TIMES = _T["times"]
_PREDATORS = _T["predators"]
_OMENS = _T["omens"]
_HABITATS = _T["habitats"]
_FUNGUS_TYPES = _T["fungus_types"]
_SUBSTRATES = _T["substrates"]
_TEXTURES = _T["textures"]
_EDIBILITY = _T["edibility"]
_TREES = _T["trees"]
_FUNGUS_USES = _T["fungus_uses"]
_FESTIVAL_ORIGINS = _T["festival_origins"]
_FESTIVAL_FOODS = _T["festival_foods"]
_CANCEL_REASONS = _T["cancel_reasons"]
_REALMS = _T["realms"]


def _pick(rng: random.Random, seq: Sequence[str], k: int) -> list[str]:
    return rng.sample(list(seq), k)


def _a(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def _units(n: int, unit: str) -> str:
    """``1 hour``, ``3 hours``."""
    return f"{n} {unit}" if n == 1 else f"{n} {unit}s"


def _cap(text: str) -> str:
    """Upper-case the first letter only (str.capitalize would lower-case the names)."""
    return text[:1].upper() + text[1:]


def _num(n: int) -> str:
    return f"{n:,}"


# ---------------------------------------------------------------------------------------
# Membership genres: each builder returns (opening sentence, body sentences) for a subtype
# ---------------------------------------------------------------------------------------

Built = tuple[str, list[str]]  # (opening sentence, body sentences)


def _place(rng: random.Random, nm: NameFactory, sub: str) -> Built:
    n = nm.word(rng)
    region, t2, t3, t4, extra = (nm.word(rng) for _ in range(5))
    p1, p2 = nm.person(rng), nm.person(rng)
    sea = rng.choice(_SEA_WORDS)
    month = rng.choice(MONTHS)
    if sub == "town":
        founded = rng.randint(1120, 1690)
        fire = rng.randint(founded + 20, 1845)
        railway = rng.randint(1852, 1921)
        industry = rng.choice(_INDUSTRIES)
        b1, b2 = _pick(rng, _BUILDINGS, 2)
        opening = rng.choice(
            (
                f"{n} is a small market town in the {region} valley, on the {rng.choice(('left', 'right'))} bank of the river {extra}.",
                f"{n} is a hill town in the province of {region}, about {rng.randint(8, 90)} kilometres {rng.choice(_DIRECTIONS)} of {t2}.",
                f"{n} is an old town on the {region} plateau, lying {rng.randint(210, 1400)} metres above sea level.",
            )
        )
        bodies = [
            f"It was founded in {founded} by {p1}, a {rng.choice(_OCCUPATIONS)} from {t2}, who built the first {b1} on the site.",
            f"At the census of {rng.randint(1961, 2019)} the town had {_num(rng.randrange(1200, 48000, 10))} inhabitants.",
            f"Its economy has long rested on {industry}, and merchants from {n} once carried their goods as far as {t3}.",
            f"The old quarter is known for {rng.choice(_LANDMARKS)}, finished in {rng.randint(founded + 10, 1899)} after {rng.randint(3, 40)} years of work.",
            f"A narrow railway reached {n} in {railway}, linking it with {t2} and the harbour at {t3}.",
            f"Every {month} the town holds a fair at which traders sell {rng.choice(_FAIR_GOODS)} in the main square.",
            f"Parish records describe a great fire in {fire} that destroyed {rng.randint(12, 300)} houses near the {b2}.",
            f"The town is twinned with {t4}, a fishing village on the {sea} Sea.",
            f"Its coat of arms shows {rng.choice(_ANIMALS_HERALDIC)} holding {rng.choice(_OBJECTS_HERALDIC)}, a reminder of its early trade in {rng.choice(_GOODS)}.",
            f"The local school, opened in {rng.randint(1870, 1965)}, is named after the poet {p2}, who was born in the town.",
        ]
    elif sub == "river":
        km = rng.randint(40, 620)
        opening = rng.choice(
            (
                f"The {n} is a river in {region} that rises in the {t4} hills and flows {km} kilometres to the {sea} Sea.",
                f"The {n} is a slow lowland river, about {km} kilometres long, that drains the marshes of eastern {region}.",
                f"The {n} is a mountain river of {region}, fed by melting snow from the slopes of Mount {t4}.",
            )
        )
        bodies = [
            f"Its largest tributary is the {extra}, which joins it just below the town of {t2}.",
            f"The river was first mapped in {rng.randint(1610, 1880)} by the surveyor {p1}, who counted {rng.randint(4, 40)} fords along its course.",
            f"Its basin covers roughly {_num(rng.randrange(300, 19000, 10))} square kilometres and is home to {rng.choice(_FISH)} and {rng.choice(_BIRDS)}.",
            f"A stone bridge of {rng.randint(3, 14)} arches has crossed the {n} at {t3} since {rng.randint(1180, 1790)}.",
            f"Barges carried {rng.choice(_CARGO)} downstream until a canal to {rng.choice((t2, t3))} was dug in {rng.randint(1790, 1905)}.",
            f"In {rng.randint(1700, 2015)} the river rose {rng.randint(2, 9)} metres above its usual level and flooded the lower streets of {t2}.",
            f"Local legend says the {n} was named after {p2}, a ferry keeper who drowned while rescuing a child.",
            f"A dam built near {t3} in {rng.randint(1925, 1988)} now supplies electricity to about {_num(rng.randrange(2000, 90000, 100))} homes.",
            f"The water of the {n} is famously {rng.choice(_COLOURS)}, a colour caused by the {rng.choice(_MINERALS)} in its upper reaches.",
        ]
    else:
        opening = rng.choice(
            (
                f"{n} is an island in the {sea} Sea, lying {rng.randint(3, 140)} kilometres off the coast of {region}.",
                f"{n} is the largest of the {extra} Islands, a chain of {rng.randint(4, 31)} islands north of {region}.",
                f"{n} is a small rocky island at the mouth of the {extra} estuary, about {rng.randint(2, 90)} square kilometres in area.",
            )
        )
        bodies = [
            f"It was first settled around {rng.randint(850, 1550)} by fishing families from {t2}.",
            f"Its highest point, {t4} Hill, rises {rng.randint(40, 890)} metres above the sea.",
            f"About {_num(rng.randrange(40, 9000, 10))} people live on the island, most of them in the harbour village of {t3}.",
            f"A lighthouse built in {rng.randint(1780, 1910)} by the engineer {p1} still guides ships past its southern cliffs.",
            f"The island is known for its colonies of {rng.choice(_BIRDS)}, which nest on the cliffs every {month}.",
            f"A ferry runs to the mainland {rng.randint(2, 12)} times a week, and the crossing takes about {rng.randrange(20, 180, 5)} minutes.",
            f"In {rng.randint(1600, 1890)} the island was sold to the family of {p2} for {_num(rng.randrange(300, 20000, 50))} silver crowns.",
            f"Its people once lived from {rng.choice(_ISLAND_TRADES)}, and a small museum in {t3} keeps the old tools.",
            f"The ruins of a chapel built in {rng.randint(1100, 1500)} stand on its northern shore.",
        ]
    return opening, bodies


def _species(rng: random.Random, nm: NameFactory, sub: str) -> Built:
    genus, ep, ep2 = nm.genus(rng), nm.epithet(rng), nm.epithet(rng)
    region, t1, t2, hills = (nm.word(rng) for _ in range(4))
    p1, p2 = nm.person(rng), nm.person(rng)
    year = rng.randint(1740, 1985)
    colour = rng.choice(_COLOURS)
    m1 = rng.randrange(12)
    if sub == "plant":
        common = f"the {region} {rng.choice(('bellflower', 'thistle', 'orchid', 'stonecrop', 'violet', 'rush', 'heather'))}"
        family = nm.word(rng, 1, 2) + "aceae"
        opening = rng.choice(
            (
                f"{_cap(common)}, known to botanists as {genus} {ep}, is a flowering plant found only in the {rng.choice(_HABITATS)} of {region}.",
                f"{genus} {ep}, commonly called {common}, is a perennial herb of the family {family}.",
                f"{_cap(common)} ({genus} {ep}) is a low shrub native to the coastal cliffs of {region}.",
            )
        )
        bodies = [
            f"It was first described in {year} by the botanist {p1}, who collected it near {t1}.",
            f"The plant grows to about {rng.randint(5, 180)} centimetres tall and has {rng.choice(_LEAVES)} leaves with {rng.choice(_EDGES)} edges.",
            f"Its {colour} flowers open in {MONTHS[m1]} and are visited mainly by {rng.choice(_POLLINATORS)}.",
            f"Each fruit holds around {rng.randint(3, 400)} seeds, which are spread by {rng.choice(_DISPERSERS)}.",
            f"Villagers in {t2} once brewed a tea from its leaves to treat {rng.choice(_AILMENTS)}.",
            f"A survey in {rng.randint(1990, 2022)} counted fewer than {_num(rng.randrange(50, 8000, 10))} plants in the wild, and it is now listed as {rng.choice(_STATUSES)}.",
            f"It prefers {rng.choice(_SOILS)} soil and does not survive frosts below minus {rng.randint(3, 25)} degrees.",
            f"A close relative, {genus} {ep2}, grows on the far side of the {hills} hills.",
        ]
    elif sub == "animal":
        i = rng.randrange(len(_ANIMAL_CLASSES))
        common = f"{region} {_ANIMAL_NOUNS[i]}"
        cls = _ANIMAL_CLASSES[i]
        opening = rng.choice(
            (
                f"The {common} ({genus} {ep}) is a small {cls} native to the {rng.choice(_HABITATS)} of {region}.",
                f"{genus} {ep}, the {common}, is a species of {cls} first recorded on the island of {hills}.",
                f"The {common} is a {cls} of the genus {genus}, found along the rivers and lakes of {region}.",
            )
        )
        yrs = rng.randint(2, 14)
        bodies = [
            f"Adults measure about {rng.randint(2, 30)} centimetres and weigh around {rng.randint(3, 400)} grams.",
            f"It feeds mainly on {rng.choice(_FOODS)} and is most active at {rng.choice(_TIMES)}.",
            f"The species was described in {year} by the naturalist {p1}, who named it after the village of {t1}.",
            f"Breeding takes place in {MONTHS[m1]}, when each pair raises up to {rng.randint(2, 9)} young.",
            f"In the wild it lives for about {yrs} years, although animals kept in captivity have reached {yrs + rng.randint(3, 9)}.",
            f"Its main predators are {rng.choice(_PREDATORS)} and, near farms, domestic cats.",
            f"A survey in {rng.randint(1990, 2022)} estimated the population at {_num(rng.randrange(300, 90000, 100))} individuals.",
            f"In the folklore of {t2}, hearing its call at dawn was said to bring {rng.choice(_OMENS)}.",
            f"Its {colour} markings make it easy to tell apart from the closely related {hills} {_ANIMAL_NOUNS[i]}.",
        ]
    else:
        common = (
            f"{region} {rng.choice(('waxcap', 'bonnet', 'earthtongue', 'brittlegill', 'milkcap', 'bracket'))}"
        )
        opening = rng.choice(
            (
                f"{genus} {ep} is a species of {rng.choice(_FUNGUS_TYPES)} fungus that grows on {rng.choice(_SUBSTRATES)} in the forests of {region}.",
                f"The {common} ({genus} {ep}) is a mushroom found in the damp {rng.choice(_HABITATS)} of {region}.",
                f"The {common} is a {rng.choice(_FUNGUS_TYPES)} fungus first collected in the {hills} hills of {region}.",
            )
        )
        bodies = [
            f"Its cap reaches {rng.randint(2, 25)} centimetres across and is {colour} with a {rng.choice(_TEXTURES)} surface.",
            f"It fruits from {MONTHS[m1]} to {MONTHS[(m1 + rng.randint(1, 4)) % 12]}, usually after heavy rain.",
            f"The mycologist {p1} described the species in {year} from specimens gathered near {t1}.",
            f"It is {rng.choice(_EDIBILITY)}, and older guides warn against confusing it with {genus} {ep2}.",
            f"Its spores are {rng.choice(('white', 'brown', 'pink', 'black', 'cream'))}, and a single cap can release {rng.randint(2, 90)} million of them in a day.",
            f"The fungus lives in partnership with the roots of {rng.choice(_TREES)} trees.",
            f"In {t2} it was once dried and used as {rng.choice(_FUNGUS_USES)}.",
            f"Only {rng.randint(3, 60)} sites are known today, and it has been protected by law since {rng.randint(1970, 2021)}.",
            f"The name honours {p2}, who first noticed it while gathering firewood.",
        ]
    return opening, bodies


def _company(rng: random.Random, nm: NameFactory, sub: str) -> Built:
    n, t1, t2, t3, n2, country = (nm.word(rng) for _ in range(6))
    p1, p2, p3 = nm.person(rng), nm.person(rng), nm.person(rng)
    founded = rng.randint(1780, 1960)
    plural, item = rng.choice(_PRODUCTS)
    if sub == "maker":
        co = f"{n} {rng.choice(('Works', 'Instruments', 'Manufacturing', 'Brothers', '& Daughters'))}"
        site = "factory"
        opening = rng.choice(
            (
                f"{co} is a manufacturer of {plural} based in the town of {t1}, in {country}.",
                f"{co} is a family-owned firm that has made {plural} in {t1} since {founded}.",
            )
        )
    elif sub == "trader":
        co = f"{n} {rng.choice(('Trading Company', 'Merchants', 'Import House'))}"
        site, plural, item = "warehouse", rng.choice(_TRADE_GOODS), "crate"
        opening = rng.choice(
            (
                f"{co} is a trading house in the port of {t1} that deals mainly in {plural}.",
                f"{co} is a merchant firm from {t1} that imports {plural} from {country} and the islands beyond.",
            )
        )
    else:
        co = f"{n} {rng.choice(('Lines', 'Shipping', 'Carriers', 'Transport Company'))}"
        site, plural = "depot", rng.choice(_VEHICLES)
        item = "ticket"
        opening = rng.choice(
            (
                f"{co} is a transport company that runs {plural} between {t1} and {t2}.",
                f"{co} is a carrier based in {t1}, operating {plural} across the province of {country}.",
            )
        )
    co2 = f"{n2} {rng.choice(('Works', 'Holdings', 'Lines', 'Merchants'))}"
    y2 = rng.randint(founded + 5, 1990)
    run = rng.randint(founded + 10, 1985)
    bodies = [
        f"The company was founded in {founded} by {p1}, a former {rng.choice(_OCCUPATIONS)}, with a loan of {_num(rng.randrange(200, 9000, 50))} crowns.",
        f"By {y2} it employed {_num(rng.randrange(30, 6000, 10))} people and had opened branches in {t2} and {t3}.",
        f"Its best-known brand, {nm.word(rng)}, was introduced in {rng.randint(founded + 1, 2005)} and remained on sale for {rng.randint(8, 70)} years.",
        f"A strike in {rng.randint(founded + 3, 1995)} closed the main {site} for {rng.randint(2, 19)} weeks.",
        f"In {rng.randint(founded + 8, 2012)} it merged with its old rival {co2}, keeping the older name.",
        f"The founder's {rng.choice(_KIN)}, {p2}, ran the firm from {run} until {run + rng.randint(6, 35)}.",
        f"Its head office, a {rng.choice(('brick', 'stone', 'glass', 'timber'))} building on {nm.word(rng)} Street, was designed by the architect {p3}.",
        f"Annual revenue reached {rng.randint(3, 900)} million crowns in {rng.randint(1995, 2022)}, much of it from trade with {country}.",
        f"The company's emblem, {rng.choice(_EMBLEMS)}, is printed on every {item} it sells.",
        f"A fire at the {site} in {rng.randint(founded + 2, 1999)} destroyed most of its early records.",
    ]
    return opening, bodies


def _person(rng: random.Random, nm: NameFactory, sub: str) -> Built:
    first, last = nm.first(rng), nm.word(rng, 2, 3)
    full = f"{first} {last}"
    she = rng.random() < 0.5
    pron, obj, poss = ("she", "her", "her") if she else ("he", "him", "his")
    Pron, Poss = pron.capitalize(), poss.capitalize()
    t1, t2, t3, t4, region, isl = (nm.word(rng) for _ in range(6))
    p2, p3, spouse = nm.person(rng), nm.person(rng), nm.person(rng)
    born = rng.randint(1520, 1905)
    age = rng.randint(38, min(94, 2015 - born))
    died = born + age
    y = born + rng.randint(20, max(21, age - 12))
    common = [
        f"In {born + rng.randint(19, 36)} {pron} married {spouse}, a {rng.choice(_OCCUPATIONS)} from {t4}.",
        f"A statue of {last} was unveiled in {t1} in {rng.randint(died + 5, min(died + 110, 2023))}.",
    ]
    born_line = f"{Pron} was born in {born} in {t1}, the child of a {rng.choice(_PARENT_JOBS)}."
    if sub == "scholar":
        field = rng.choice(_FIELDS)
        opening = rng.choice(
            (
                f"{full} (born {born} in {t1}, died {died}) was a scholar of {field} from the region of {region}.",
                f"{full} was a scholar of {field} who taught for most of {poss} life at the academy of {t2}.",
            )
        )
        bodies = [
            f"{Pron} studied {field} at the academy of {t2} under {p2}.",
            f"{Poss} major work, On the {rng.choice(_TOPICS)} of {region}, appeared in {rng.randint(2, 9)} volumes between {y} and {y + rng.randint(3, 12)}.",
            f"In {y + rng.randint(1, 8)} {pron} became the first director of the {region} Institute.",
            f"{Pron} corresponded for {rng.randint(5, 30)} years with {p3}, and {rng.randint(40, 900)} of their letters survive.",
            f"{Pron} died in {t3} at the age of {age}, leaving a library of {_num(rng.randrange(300, 12000, 10))} books to the town.",
        ]
    elif sub == "artist":
        art, works, work = rng.choice(_ARTS)
        title = f"{rng.choice(_TITLE_ADJS)} {rng.choice(_TITLE_NOUNS)}"
        opening = rng.choice(
            (
                f"{full} was {_a(art)} from {region} who worked in the city of {t2} for most of {poss} life.",
                f"{full} (born {born} in {t1}, died {died}) was {_a(art)} known for {poss} scenes of {region}.",
            )
        )
        bodies = [
            f"{Pron} trained in the workshop of {p2} before opening {poss} own studio at the age of {rng.randint(19, 34)}.",
            f"Over a career of {rng.randint(15, 55)} years {pron} produced about {rng.randint(40, 700)} {works}.",
            f"{Poss} best-known {work}, {title}, was completed in {y} and is kept in the civic collection of {t2}.",
            f"Critics of the time compared {poss} use of {rng.choice(_FEATURES)} to that of {p3}.",
            f"In {y + rng.randint(1, 6)} {pron} travelled to {t3}, where {pron} spent {rng.randint(2, 11)} years.",
        ]
    else:
        sea = rng.choice(_SEA_WORDS)
        ship = (
            f"{rng.choice(('Swift', 'Morning', 'Patient', 'Silver', 'Faithful'))} {rng.choice(_TITLE_NOUNS)}"
        )
        opening = rng.choice(
            (
                f"{full} was a navigator and chart maker who led {rng.randint(3, 9)} voyages into the {sea} Sea.",
                f"{full} (born {born} in {t1}, died {died}) was a sea captain and explorer from {region}.",
            )
        )
        bodies = [
            f"In {y} {pron} sailed from {t2} aboard the {ship} with a crew of {rng.randint(12, 140)}.",
            f"On {poss} second voyage {pron} reached the island of {isl}, which {pron} charted in {rng.randint(4, 60)} days.",
            f"{Poss} logbooks, kept in the archive of {t2}, record the winds and currents of every day at sea.",
            f"{Pron} lost {rng.randint(2, 30)} sailors to fever off the coast of {region} in {y + rng.randint(1, 9)}.",
            f"A narrow strait between {isl} and {t3} is named after {obj}.",
            f"{Poss} charts of the {sea} Sea were used by pilots from {t4} for {rng.randint(20, 120)} years.",
        ]
    if "born" not in opening:
        common.append(born_line)
    return opening, bodies + common


def _event(rng: random.Random, nm: NameFactory, sub: str) -> Built:
    n, t1, t2, t3, t4, region, isl, riv = (nm.word(rng) for _ in range(8))
    p1, p2 = nm.person(rng), nm.person(rng)
    month = rng.choice(MONTHS)
    day = rng.randint(1, 28)
    if sub == "festival":
        since = rng.randint(1350, 1950)
        opening = rng.choice(
            (
                f"The {n} Festival is a {rng.randint(2, 9)}-day celebration held every {month} in the town of {t1}, in {region}.",
                f"The Feast of {n} is an annual festival in {t1} that marks the end of the {rng.choice(('harvest', 'fishing season', 'grape picking', 'winter'))}.",
                f"{n} Lantern Night is a festival held in the villages of the {region} valley every {month} since {since}.",
            )
        )
        bodies = [
            f"According to local accounts it began in {since}, when {p1} {rng.choice(_FESTIVAL_ORIGINS)}.",
            f"Its highlight is a procession of {rng.randint(5, 80)} painted boats along the river {riv}.",
            f"On the last evening a bread-baking contest is judged by the elders of {t2}.",
            f"In {rng.randint(1990, 2023)} the festival drew about {_num(rng.randrange(2000, 90000, 100))} visitors, many times the population of {t1}.",
            f"Traditional dishes include {' and '.join(_pick(rng, _FESTIVAL_FOODS, 2))}.",
            f"It was cancelled only once, in {rng.randint(since + 1, 2010)}, after {rng.choice(_CANCEL_REASONS)}.",
            f"Since {rng.randint(1900, 2015)} it has been organised by the {t3} Society, which has {rng.randint(40, 2000)} members.",
            f"Children dress as {rng.choice(('herons', 'millers', 'sailors', 'bees', 'foxes'))} and sing songs collected by {p2}.",
        ]
    elif sub == "treaty":
        y = rng.randint(1290, 1870)
        a = f"{rng.choice(_REALMS)} {t2}"
        b = f"{rng.choice(_REALMS)} {t3}"
        opening = rng.choice(
            (
                f"The Treaty of {t1} was an agreement signed on {day} {month} {y} between {a} and {b}.",
                f"The {t1} Accord of {y} ended the {rng.randint(3, 30)}-year war between {a} and {b}.",
            )
        )
        bodies = [
            f"It was negotiated over {rng.randint(2, 20)} months by the envoys {p1} and {p2}.",
            f"Under its terms {t3} gave up the island of {isl} and paid {_num(rng.randrange(1000, 90000, 500))} silver crowns.",
            f"It also fixed a shared toll of {rng.randint(2, 15)} percent on goods carried along the river {riv}.",
            f"The original copy, written on {rng.randint(3, 40)} sheets of parchment, is kept in the archive of {t4}.",
            f"The peace lasted {rng.randint(6, 90)} years, until a dispute over fishing rights near {isl}.",
            f"Historians still debate whether the treaty favoured {t2}, whose envoy wrote most of the text.",
            f"A stone marking the new border still stands near the village of {n}.",
            f"The signing took place in the great hall of {t1}, where a painting of the scene hangs today.",
        ]
    else:
        y = rng.randint(1500, 1990)
        opening = rng.choice(
            (
                f"The Great Storm of {y} was a violent windstorm that struck the coast of {region} on the night of {day} {month}.",
                f"The {n} Gale was a storm that crossed the {rng.choice(_SEA_WORDS)} Sea in {month} {y}, named after the town it hit hardest.",
                f"The storm known as the {n} Flood battered the islands of {region} for {rng.randint(2, 6)} days in {month} {y}.",
            )
        )
        bodies = [
            f"Wind speeds were estimated at {rng.randint(110, 230)} kilometres per hour at the lighthouse of {t2}.",
            f"At least {rng.randint(3, 140)} ships were lost, and {rng.randint(10, 900)} people died along the coast.",
            f"The sea wall at {t3} was breached in {rng.randint(2, 14)} places, flooding {_num(rng.randrange(40, 4000, 10))} houses.",
            f"The harbour master {p1} kept a record of the storm hour by hour, which was printed in {y + rng.randint(1, 30)}.",
            f"Money raised in {t4} paid for a new sea wall, completed in {y + rng.randint(2, 12)}.",
            f"Marks showing the height of the water are still visible on the church tower of {t3}.",
            f"The storm changed the coastline, closing the old channel between {isl} and the mainland.",
            f"A ballad about the storm, written by {p2}, is still sung in the taverns of {t1}.",
        ]
    return opening, bodies


SUBTYPES: dict[str, tuple[str, ...]] = {
    "place": ("town", "river", "island"),
    "species": ("plant", "animal", "fungus"),
    "company": ("maker", "trader", "transport"),
    "person": ("scholar", "artist", "navigator"),
    "event": ("festival", "treaty", "storm"),
}

_BUILDERS: dict[str, Callable[[random.Random, NameFactory, str], Built]] = {
    "place": _place,
    "species": _species,
    "company": _company,
    "person": _person,
    "event": _event,
}


def _assemble(rng: random.Random, opening: str, bodies: list[str], band: tuple[int, int]) -> str | None:
    """Opening + body sentences in random order until the estimate is inside ``band``."""
    lo, hi = band
    order = list(bodies)
    rng.shuffle(order)
    parts = [opening]
    size = estimate_tokens(opening)
    for sentence in order:
        longer = estimate_tokens(" ".join([*parts, sentence]))
        if longer <= hi:
            parts.append(sentence)
            size = longer
        if size >= lo:
            return " ".join(parts)
    return None


def generate_membership(seed: int = 0) -> list[dict[str, Any]]:
    """300 fictional encyclopedia paragraphs (60 per genre), half members, half non-members.

    Records: ``{"id", "genre", "subtype", "text", "label", "split"}``; label 1 = member.
    Subtypes rotate within a genre (20 each); the split is 30/30 within every genre.
    """
    rng = random.Random(seed)
    names = NameFactory()
    seen: set[str] = set()
    records: list[dict[str, Any]] = []
    for genre in GENRES:
        build = _BUILDERS[genre]
        docs: list[tuple[str, str]] = []
        while len(docs) < DOCS_PER_GENRE:
            sub = SUBTYPES[genre][len(docs) % len(SUBTYPES[genre])]
            opening, bodies = build(rng, names, sub)
            text = _assemble(rng, opening, bodies, MEMBERSHIP_BAND)
            if text is None or text in seen:
                continue
            seen.add(text)
            docs.append((sub, text))
        members = set(rng.sample(range(DOCS_PER_GENRE), DOCS_PER_GENRE // 2))
        for i, (sub, text) in enumerate(docs):
            label = 1 if i in members else 0
            records.append(
                {
                    "id": f"mem-{genre}-{i:03d}",
                    "genre": genre,
                    "subtype": sub,
                    "text": text,
                    "label": label,
                    "split": "member" if label else "nonmember",
                }
            )
    return records


# ---------------------------------------------------------------------------------------
# Arithmetic word problems
# ---------------------------------------------------------------------------------------

_PEOPLE = _T["people"]
_ITEMS = _T["items"]
_THINGS = _T["things"]
_BAKED = _T["baked"]
_PLACES_TO = _T["places_to"]
_SHOPS = _T["shops"]
_PRICED = _T["priced"]


def _person_pick(rng: random.Random) -> tuple[str, str, str, str]:
    name, pron = rng.choice(_PEOPLE)
    poss = "her" if pron == "she" else "his"
    return name, pron, pron.capitalize(), poss


def _arith_shopping(rng: random.Random) -> tuple[str, str, int]:
    name, pron, Pron, _ = _person_pick(rng)
    form = rng.randrange(3)
    if form == 0:
        i1s, i2s = (plural for _, plural in rng.sample(_ITEMS, 2))
        a, p1, b, p2 = rng.randint(2, 9), rng.randint(2, 12), rng.randint(2, 9), rng.randint(2, 12)
        x, y = a * p1, b * p2
        z = x + y
        bill = next(v for v in (20, 50, 100, 200) if v > z)
        ans = bill - z
        q = (
            f"{name} buys {a} {i1s} at {p1} dollars each and {b} {i2s} at {p2} dollars each. "
            f"{Pron} pays with a {bill}-dollar bill. How much change does {pron} get, in dollars?"
        )
        s = (
            f"The {i1s} cost {a} * {p1} = {x} dollars and the {i2s} cost {b} * {p2} = {y} dollars. "
            f"Together that is {x} + {y} = {z} dollars, so the change is {bill} - {z} = {ans} dollars."
        )
    elif form == 1:
        _, items = rng.choice(_ITEMS)
        k = rng.randint(3, 12)
        packs = rng.randint(2, 15)
        n = k * packs
        p = rng.randint(2, 20)
        ans = packs * p
        q = (
            f"{rng.choice(_SHOPS)} sells {items} in packs of {k}. {name} needs exactly {n} {items} and "
            f"each pack costs {p} dollars. How many dollars does {pron} spend?"
        )
        s = f"{name} needs {n} / {k} = {packs} packs, which cost {packs} * {p} = {ans} dollars."
    else:
        _, items = rng.choice(_ITEMS)
        a, b = rng.randint(3, 15), rng.randint(2, 12)
        c = rng.randint(1, a + b - 1)
        p = rng.randint(2, 15)
        t, kept = a + b, a + b - c
        ans = kept * p
        q = (
            f"{name} buys {a} {items} for {p} dollars each. The next day {pron} buys {b} more at the same "
            f"price, then returns {c} of them for a full refund. How many dollars did {pron} spend in the end?"
        )
        s = (
            f"{name} bought {a} + {b} = {t} {items} and kept {t} - {c} = {kept}. "
            f"{Pron} spent {kept} * {p} = {ans} dollars."
        )
    return q, s, ans


def _arith_travel(rng: random.Random) -> tuple[str, str, int]:
    name, _, _, poss = _person_pick(rng)
    form = rng.randrange(4)
    if form == 0:
        v, h, v2, h2 = (
            rng.randrange(40, 130, 5),
            rng.randint(2, 6),
            rng.randrange(40, 130, 5),
            rng.randint(1, 5),
        )
        x, y = v * h, v2 * h2
        ans = x + y
        q = (
            f"A train travels at {v} kilometres per hour for {h} hours, then at {v2} kilometres per hour "
            f"for {_units(h2, 'more hour')}. How many kilometres does it travel in total?"
        )
        s = f"First part: {v} * {h} = {x} km. Second part: {v2} * {h2} = {y} km. Total: {x} + {y} = {ans} km."
    elif form == 1:
        v, w = rng.choice(((12, 4), (15, 5), (18, 6), (20, 4), (16, 4), (24, 6), (12, 6), (10, 5)))
        d = v * rng.randint(1, 3)
        if d % w:
            d = v * w // math.gcd(v, w)
        t1, t2 = d // v, d // w
        ans = t1 + t2
        dest = rng.choice(_PLACES_TO).replace("her ", poss + " ")
        q = (
            f"{name} cycles {d} kilometres to {dest} at {v} kilometres per hour and walks back the same way "
            f"at {w} kilometres per hour. How many hours does the round trip take?"
        )
        s = (
            f"Cycling takes {d} / {v} = {_units(t1, 'hour')} and walking takes {d} / {w} = {_units(t2, 'hour')}, "
            f"so {t1} + {t2} = {ans} hours."
        )
    elif form == 2:
        speed = rng.randrange(30, 100, 10)
        h = rng.randint(2, 5)
        d = speed * h
        h2 = rng.randint(2, 9)
        d2 = speed * h2
        ans = h2 * 60
        q = (
            f"A bus covers {d} kilometres in {h} hours. At the same speed, how many minutes does it need "
            f"for a trip of {d2} kilometres?"
        )
        s = f"The speed is {d} / {h} = {speed} km per hour. The trip takes {d2} / {speed} = {h2} hours, which is {h2} * 60 = {ans} minutes."
    else:
        n, d, days = rng.randint(2, 8), rng.randint(6, 45), rng.randint(2, 7)
        rt = d * 2
        daily = rt * n
        ans = daily * days
        q = (
            f"A ferry makes {n} round trips a day between two harbours that are {d} kilometres apart. "
            f"How many kilometres does it sail in {days} days?"
        )
        s = f"One round trip is {d} * 2 = {rt} km, so a day is {rt} * {n} = {daily} km and {days} days are {daily} * {days} = {ans} km."
    return q, s, ans


def _arith_sharing(rng: random.Random) -> tuple[str, str, int]:
    name, pron, Pron, _ = _person_pick(rng)
    form = rng.randrange(3)
    if form == 0:
        baked = rng.choice(_BAKED)
        f = rng.randint(2, 8)
        each = rng.randint(2, 9)
        kept = rng.randint(1, 8)
        a = rng.randint(2, 6)
        total = f * each + kept
        # choose trays so that a * k == total
        while total % a:
            kept += 1
            total = f * each + kept
        k = total // a
        rest = total - kept
        refl = "herself" if pron == "she" else "himself"
        q = (
            f"{name} bakes {a} trays of {baked} with {k} on each tray. {Pron} keeps {kept} for {refl} "
            f"and shares the rest equally among {f} friends. How many {baked} does each friend get?"
        )
        s = (
            f"{name} bakes {a} * {k} = {total} {baked}. After keeping {kept}, {total} - {kept} = {rest} remain, "
            f"so each friend gets {rest} / {f} = {each}."
        )
        ans = each
    elif form == 1:
        other, _ = rng.choice([p for p in _PEOPLE if p[0] != name])
        things = rng.choice(_THINGS)
        b = rng.randint(2, 9)
        total = b * rng.randint(4, 30)
        x = rng.randint(1, total - 1)
        y = total - x
        ans = total // b
        q = (
            f"{name} has {x} {things} and {other} has {y}. They put them together and divide them equally "
            f"into {b} boxes. How many {things} go in each box?"
        )
        s = f"Together they have {x} + {y} = {total} {things}, so each box gets {total} / {b} = {ans}."
    else:
        things = rng.choice(_THINGS)
        p, k = rng.randint(3, 12), rng.randint(6, 24)
        total = p * k
        per = rng.randint(1, 6)
        st = rng.randint(5, max(5, total // per - 1))
        given = per * st
        ans = total - given
        q = (
            f"A teacher has {p} packs of {things} with {k} in each pack. She gives {per} to each of her "
            f"{st} students. How many {things} are left over?"
        )
        s = f"There are {p} * {k} = {total} {things}. The students get {per} * {st} = {given}, leaving {total} - {given} = {ans}."
    return q, s, ans


def _arith_rate(rng: random.Random) -> tuple[str, str, int]:
    name, _, Pron, poss = _person_pick(rng)
    form = rng.randrange(4)
    if form == 0:
        r = rng.randint(4, 20)
        c = rng.randint(2, 12)
        pages = r * rng.randint(1, 6)
        t = c * pages
        ans = t // r
        q = f"A printer prints {r} pages per minute. How many minutes does it take to print {c} copies of a {pages}-page report?"
        s = f"That is {c} * {pages} = {t} pages, which take {t} / {r} = {ans} minutes."
    elif form == 1:
        r, h, h2 = rng.randint(10, 45), rng.randint(1, 5), rng.randint(1, 5)
        x, y = r * h, r * h2
        read = x + y
        total = read + rng.randint(5, 200)
        ans = total - read
        q = (
            f"{name} reads {r} pages an hour. {Pron} reads for {_units(h, 'hour')} on Saturday and {_units(h2, 'hour')} on Sunday. "
            f"How many pages of {poss} {total}-page book are still left to read?"
        )
        s = f"Saturday: {r} * {h} = {x} pages. Sunday: {r} * {h2} = {y} pages. Read: {x} + {y} = {read}. Left: {total} - {read} = {ans} pages."
    elif form == 2:
        leak = rng.randint(1, 6)
        net = rng.randint(2, 12)
        r = net + leak
        ans = rng.randint(5, 40)
        cap = net * ans
        q = (
            f"A tap fills a {cap}-litre tank at {r} litres per minute, but a crack lets {leak} litres per minute "
            f"leak out. How many minutes does it take to fill the empty tank?"
        )
        s = f"The tank gains {r} - {leak} = {net} litres per minute, so it fills in {cap} / {net} = {ans} minutes."
    else:
        r, h, d = rng.randint(8, 60), rng.randint(4, 10), rng.randint(4, 6)
        day = r * h
        ans = day * d
        bakery = rng.choice(("A bakery", "A small bakery", "The village bakery"))
        q = (
            f"{bakery} bakes {r} loaves an hour and works {h} hours a day. It is open {d} days a week. "
            f"How many loaves does it bake in a week?"
        )
        s = f"Each day it bakes {r} * {h} = {day} loaves, so in a week it bakes {day} * {d} = {ans} loaves."
    return q, s, ans


def _arith_percent(rng: random.Random) -> tuple[str, str, int]:
    name, pron, Pron, _ = _person_pick(rng)
    form = rng.randrange(4)
    pct = rng.choice((10, 20, 25, 30, 40, 50, 60, 75))
    unit = 100 // math.gcd(100, pct)
    if form == 0:
        item = rng.choice(_PRICED)
        price = unit * rng.randint(1, 40)
        if price < 20:
            price *= 10
        disc = price * pct // 100
        ans = price - disc
        q = f"{_cap(_a(item))} costs {price} dollars. It is on sale at {pct}% off. How many dollars does it cost after the discount?"
        s = f"The discount is {price} * {pct} / 100 = {disc} dollars, so the price is {price} - {disc} = {ans} dollars."
    elif form == 1:
        w = unit * rng.randint(2, 30)
        n = rng.randint(2, 12)
        save = w * pct // 100
        ans = save * n
        q = f"{name} earns {w} dollars a week and saves {pct}% of it. How many dollars does {pron} save in {n} weeks?"
        s = f"Each week {pron} saves {w} * {pct} / 100 = {save} dollars, so in {n} weeks {pron} saves {save} * {n} = {ans} dollars."
    elif form == 2:
        n = unit * rng.randint(4, 40)
        bus = n * pct // 100
        rest = n - bus
        walk = rng.randint(1, rest - 1)
        ans = rest - walk
        q = (
            f"A school has {n} students. {pct}% of them take the bus and {walk} of the others walk. "
            f"The rest are driven by their parents. How many students are driven?"
        )
        s = f"The bus carries {n} * {pct} / 100 = {bus} students, leaving {n} - {bus} = {rest}. Driven: {rest} - {walk} = {ans}."
    else:
        k = rng.randint(2, 9)
        fruit = rng.choice(("apples", "pears", "plums", "potatoes", "tomatoes", "cherries"))
        n = 0
        while n == 0 or (n - n * pct // 100) % k:
            n = unit * rng.randint(2, 60)
        sold = n * pct // 100
        rest = n - sold
        ans = rest // k
        q = (
            f"{name} harvests {n} kilograms of {fruit}. {pct}% are sold at the market and the rest is "
            f"split equally into {k} crates. How many kilograms go in each crate?"
        )
        s = f"{Pron} sells {n} * {pct} / 100 = {sold} kg, leaving {n} - {sold} = {rest} kg, so each crate holds {rest} / {k} = {ans} kg."
    return q, s, ans


_ARITH_BUILDERS: dict[str, Callable[[random.Random], tuple[str, str, int]]] = {
    "shopping": _arith_shopping,
    "travel": _arith_travel,
    "sharing": _arith_sharing,
    "rate": _arith_rate,
    "percent": _arith_percent,
}


def generate_arithmetic(seed: int = 0, n: int = 400) -> list[dict[str, Any]]:
    """``n`` distinct word problems, cycling through ARITHMETIC_KINDS.

    Records: ``{"id", "question", "answer", "solution", "kind"}``; the answer is an integer
    string and the solution states each step as ``a op b = c`` and ends with
    ``The answer is <answer>.``
    """
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    while len(out) < n:
        kind = ARITHMETIC_KINDS[len(out) % len(ARITHMETIC_KINDS)]
        question, steps, answer = _ARITH_BUILDERS[kind](rng)
        if question in seen or answer <= 0:
            continue
        seen.add(question)
        out.append(
            {
                "id": f"arith-{len(out):03d}",
                "question": question,
                "answer": str(answer),
                "solution": f"{steps} The answer is {answer}.",
                "kind": kind,
            }
        )
    return out


# ---------------------------------------------------------------------------------------
# Filler prose
# ---------------------------------------------------------------------------------------

_TASKS: tuple[tuple[str, tuple[str, ...]], ...] = _T["tasks"]
_HOWTO_OPENINGS = _T["howto_openings"]
_HOWTO_CLOSINGS = _T["howto_closings"]
_CONNECTORS = _T["connectors"]

_WEEKDAYS = _T["weekdays"]
_MORNINGS = _T["mornings"]
_MIDDAYS = _T["middays"]
_EVENINGS = _T["evenings"]
_WEATHER_NOTES = _T["weather_notes"]

_DISHES = _T["dishes"]
_RECIPE_STEPS = _T["recipe_steps"]
_RECIPE_OPENINGS = _T["recipe_openings"]

_OBJECTS = _T["objects"]
_OBJECT_LINES = _T["object_lines"]
_OBJECT_OPENINGS = (
    "The {obj} in our kitchen is made of {mat} and has {feat}.",
    "A description of an ordinary thing: my {obj}, made of {mat}, with {feat}.",
    "There is a {obj} in the hallway, made of {mat}, with {feat}.",
)

_VEG = _T["veg"]
_GARDEN_LINES = _T["garden_lines"]
_GARDEN_OPENINGS = (
    "Garden diary, {day} {month}.",
    "Allotment notes for {month}, week {w}.",
    "Notes from the back garden on a {weekday} in {month}.",
)

_WALK_PLACES = _T["walk_places"]
_WALK_SIGHTS = _T["walk_sights"]
_WALK_OPENINGS = (
    "Took a walk along {place} after lunch, about {km} kilometres in all.",
    "An evening walk along {place}, slow and quiet.",
    "Walked along {place} on {weekday} morning before work.",
)
_WALK_CLOSINGS = _T["walk_closings"]


def _fill_howto(rng: random.Random) -> list[str]:
    task, steps = rng.choice(_TASKS)
    k = rng.randint(3, min(5, len(steps)))
    idx = sorted(rng.sample(range(len(steps)), k))
    middle = rng.sample(_CONNECTORS[1:4], 3)
    body = []
    for j, i in enumerate(idx):
        c = "First," if j == 0 else "Finally," if j == len(idx) - 1 else middle[j - 1]
        body.append(f"{c} {steps[i]}.")
    closing = rng.choice(_HOWTO_CLOSINGS).format(n=rng.choice((2, 3, 4, 6, 10, 15, 20, 30, 45)))
    return [rng.choice(_HOWTO_OPENINGS).format(task=task), *body, closing]


def _fill_weather(rng: random.Random) -> list[str]:
    head = f"{rng.choice(_WEEKDAYS)}, {rng.randint(1, 28)} {rng.choice(MONTHS)}."
    lines = [f"{rng.choice(_MORNINGS)}.", f"{rng.choice(_MIDDAYS)}.", f"{rng.choice(_EVENINGS)}."]
    notes = [
        s.format(mm=rng.randint(2, 30), t=rng.randint(-4, 29), h=rng.randint(2, 9))
        for s in rng.sample(_WEATHER_NOTES, 3)
    ]
    return [head, *lines, *notes]


def _fill_recipe(rng: random.Random) -> list[str]:
    dish, ings = rng.choice(_DISHES)
    use = rng.sample(ings, rng.randint(3, 5))
    ing = ", ".join(use[:-1]) + f" and {use[-1]}"
    s = rng.randint(2, 6)
    steps = [
        t.format(
            n=rng.randrange(10, 50, 5),
            m=rng.randint(2, 10),
            d=rng.randint(2, 4),
            s=s,
            s2=s - 1,
            deg=rng.randrange(160, 230, 10),
        )
        for t in [_RECIPE_STEPS[i] for i in sorted(rng.sample(range(len(_RECIPE_STEPS)), 5))]
    ]
    return [rng.choice(_RECIPE_OPENINGS).format(dish=dish), f"You will need {ing}.", *steps]


def _fill_object(rng: random.Random) -> list[str]:
    obj, mat, feat = rng.choice(_OBJECTS)
    lines = [
        s.format(cm=rng.randint(8, 90), y=rng.randint(2, 25), p=rng.randint(2, 40))
        for s in rng.sample(_OBJECT_LINES, 5)
    ]
    return [rng.choice(_OBJECT_OPENINGS).format(obj=obj, mat=mat, feat=feat), *lines]


def _fill_garden(rng: random.Random) -> list[str]:
    head = rng.choice(_GARDEN_OPENINGS).format(
        day=rng.randint(1, 28), month=rng.choice(MONTHS), w=rng.randint(1, 4), weekday=rng.choice(_WEEKDAYS)
    )
    lines = [
        s.format(n=rng.randint(2, 8), m=rng.randrange(10, 90, 5), veg=rng.choice(_VEG))
        for s in rng.sample(_GARDEN_LINES, 6)
    ]
    return [head, *lines]


def _fill_walk(rng: random.Random) -> list[str]:
    head = rng.choice(_WALK_OPENINGS).format(
        place=rng.choice(_WALK_PLACES), km=rng.randint(2, 12), weekday=rng.choice(_WEEKDAYS)
    )
    sights = rng.sample(_WALK_SIGHTS, 5)
    return [head, *sights, rng.choice(_WALK_CLOSINGS).format(m=rng.randrange(30, 150, 5))]


_FILL_BUILDERS: dict[str, Callable[[random.Random], list[str]]] = {
    "howto": _fill_howto,
    "weather": _fill_weather,
    "recipe": _fill_recipe,
    "object": _fill_object,
    "garden": _fill_garden,
    "walk": _fill_walk,
}


def generate_filler(seed: int = 0, n: int = 1200) -> list[dict[str, Any]]:
    """``n`` distinct short neutral paragraphs (records ``{"id", "text"}``), kinds in rotation."""
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    while len(out) < n:
        kind = FILLER_KINDS[len(out) % len(FILLER_KINDS)]
        sentences = _FILL_BUILDERS[kind](rng)
        text = _assemble_in_order(sentences, FILLER_BAND)
        if text is None or text in seen:
            continue
        seen.add(text)
        out.append({"id": f"fill-{len(out):04d}", "text": text})
    return out


def _assemble_in_order(sentences: list[str], band: tuple[int, int]) -> str | None:
    """The longest prefix of ``sentences`` whose estimate is at most ``band[1]``; None if below ``band[0]``."""
    lo, hi = band
    for cut in range(len(sentences), 1, -1):
        text = " ".join(sentences[:cut])
        size = estimate_tokens(text)
        if size <= hi:
            return text if size >= lo else None
    return None


# ---------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------


def to_jsonl(records: Sequence[dict[str, Any]]) -> str:
    """One compact JSON object per line, ASCII only, ``\\n`` line ends (byte-stable)."""
    return "".join(json.dumps(r, ensure_ascii=True) + "\n" for r in records)


def read_jsonl(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def write_all(folder: str | Path, seed: int = 0) -> dict[str, Path]:
    """Generate the three corpora and write them into ``folder``; returns the paths."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    corpora = {
        MEMBERSHIP_FILE: generate_membership(seed),
        ARITHMETIC_FILE: generate_arithmetic(seed),
        FILLER_FILE: generate_filler(seed),
    }
    paths: dict[str, Path] = {}
    for name, records in corpora.items():
        path = out / name
        path.write_bytes(to_jsonl(records).encode("utf-8"))
        paths[name] = path
    return paths


def _load(name: str) -> list[dict[str, Any]]:
    resource = resources.files("mnemoscope.bench") / "data" / name
    return read_jsonl(resource.read_text(encoding="utf-8"))


def load_membership() -> list[dict[str, Any]]:
    """The shipped membership corpus (300 records, label 1 = member)."""
    return _load(MEMBERSHIP_FILE)


def load_arithmetic() -> list[dict[str, Any]]:
    """The shipped arithmetic word problems (400 records)."""
    return _load(ARITHMETIC_FILE)


def load_filler() -> list[dict[str, Any]]:
    """The shipped filler paragraphs (1200 records)."""
    return _load(FILLER_FILE)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mnemoscope.bench.corpus",
        description="Regenerate the authored benchmark corpora (membership, arithmetic, filler).",
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
    for name, path in write_all(args.out, args.seed).items():
        print(f"{name}: {len(read_jsonl(path.read_text(encoding='utf-8')))} records -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
