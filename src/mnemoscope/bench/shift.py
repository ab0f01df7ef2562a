"""The shift-controlled pair: one fictional corpus split by a surface property, no injection.

Members (label 1) and non-members (label 0) are short fictional local-history paragraphs on
the same ten topics (bridge, market, school, mill, harbour, festival, flood, library,
railway, hospital), 15 per topic and class, 300 in all. Each topic has one sentence
template set per register with the same slots (invented town, person and river names from the
membership corpus's syllable tables, occupations, goods, counts, a month), filled from the
same distributions on both sides. Only two surface properties differ:

* **members**: archaic register ("did resolve", "whereof", "shillings", gas light) and
  invented years 1880-1910;
* **non-members**: modern register (apps, drones, e-bikes) and invented years 2031-2060.

No model was ever trained on either side: the split is not membership. A detector that reads
the text (a TF-IDF classifier, a date feature, a sentence-embedding classifier) separates
the two classes almost perfectly; a method that measures memory must stay at chance. This is
the shape of WikiMIA's temporal split (Das et al., 2024, "Blind baselines"; Duan et al.,
2024) with the shift made explicit.

The words are data (``bench/data/shift_tables.json``); the shipped file
``bench/data/shift.jsonl`` (``{id, context, label, topic, register, year}``, readable by
``crm eval`` and by ``bench run`` as generic JSONL) is :func:`generate_shift` with seed 0,
regenerated with ``python -m mnemoscope.bench.shift --out src/mnemoscope/bench/data``.

>>> docs = shift_documents()
>>> len(docs), sum(d.label for d in docs)
(300, 150)
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mnemoscope.bench.corpus import MONTHS, NameFactory
from mnemoscope.bench.datasets import Document
from mnemoscope.bench.tables import DATA_DIR, load_tables

__all__ = [
    "PER_TOPIC",
    "REGISTERS",
    "SHIFT_FILE",
    "TOPICS",
    "generate_shift",
    "load_shift",
    "main",
    "shift_documents",
]

SHIFT_FILE = "shift.jsonl"
PER_TOPIC = 15  # documents per topic and class
REGISTERS = {"archaic": 1, "modern": 0}  # register -> label (1 = "member")

_T = load_tables("shift_tables.json")
_C = load_tables("corpus_tables.json")
TOPICS: tuple[str, ...] = tuple(_T["topics"])
_SLOT = re.compile(r"\{(\w+)\}")


def _slots(rng: random.Random, names: NameFactory, year_range: tuple[int, int]) -> dict[str, str]:
    """One draw of every slot; only ``year``/``year2`` depend on the register's era."""
    year = rng.randint(year_range[0], year_range[1] - 9)
    goods, goods2 = rng.sample(list(_C["goods"]), 2)
    return {
        "town": names.word(rng),
        "town2": names.word(rng),
        "river": names.word(rng, 2, 2),
        "person": names.person(rng),
        "occupation": rng.choice(_C["occupations"]),
        "goods": goods,
        "goods2": goods2,
        "fair_goods": rng.choice(_C["fair_goods"]),
        "cargo": rng.choice(_C["cargo"]),
        "bird": rng.choice(_C["birds"]),
        "month": rng.choice(MONTHS),
        "n_small": str(rng.randint(3, 19)),
        "n_mid": str(rng.randint(40, 900)),
        "year": str(year),
        "year2": str(year + rng.randint(2, 9)),
    }


def _render(templates: Sequence[str], slots: dict[str, str], keep: Sequence[int]) -> str:
    # the opening sentence + two of the four body sentences, in order
    chosen = [templates[0]] + [t for i, t in enumerate(templates[1:]) if i in keep]
    return " ".join(_SLOT.sub(lambda m: slots[m.group(1)], t) for t in chosen)


def generate_shift(seed: int = 0) -> list[dict[str, Any]]:
    """The pair as records ``{id, context, label, topic, register, year}``, deterministic in ``seed``.

    Per topic, 15 archaic (label 1) and 15 modern (label 0) paragraphs in a seeded order, each
    the topic's opening sentence and two of its four body sentences; the slot draws of both registers use the same distributions, so the topics, names, numbers and
    sentence structure are balanced and only the register and the era of the years differ.
    """
    rng = random.Random(seed)
    names = NameFactory()
    eras = {reg: (int(lo), int(hi)) for reg, (lo, hi) in _T["eras"].items()}
    out: list[dict[str, Any]] = []
    for topic in TOPICS:
        regs = [r for r in REGISTERS for _ in range(PER_TOPIC)]
        rng.shuffle(regs)
        for j, reg in enumerate(regs):
            slots = _slots(rng, names, eras[reg])
            text = _render(_T["topics"][topic][reg], slots, keep=rng.sample(range(4), 2))
            out.append(
                {
                    "id": f"shift-{topic}-{j:02d}",
                    "context": text,
                    "label": REGISTERS[reg],
                    "topic": topic,
                    "register": reg,
                    "year": int(slots["year"]),
                }
            )
    return out


def shift_documents(seed: int = 0) -> list[Document]:
    """The shift-controlled pair as labelled documents (1 = archaic/1880-1910, 0 = modern/2031-2060).

    Seed 0 is the shipped file. ``meta`` holds ``topic``, ``register`` and ``year`` (the first
    year the text mentions).
    """
    return [
        Document(
            id=r["id"],
            text=r["context"],
            label=r["label"],
            meta={"topic": r["topic"], "register": r["register"], "year": r["year"]},
        )
        for r in generate_shift(seed)
    ]


def load_shift() -> list[dict[str, Any]]:
    """The shipped records (``bench/data/shift.jsonl``)."""
    text = (DATA_DIR / SHIFT_FILE).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write the shift-controlled pair (shift.jsonl).")
    ap.add_argument("--out", default=str(DATA_DIR))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    path = Path(args.out) / SHIFT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r, ensure_ascii=False) for r in generate_shift(args.seed)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{path}: {len(lines)} records")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
