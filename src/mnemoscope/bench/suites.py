"""Built-in suites: the authored membership corpus and the contamination mixtures.

* ``membership``: 300 fictional encyclopedia paragraphs (5 genres); a seeded split makes
  150 members (label 1, used to fine-tune siblings) and 150 non-members.
* ``contamination`` at rate r: ``n_filler`` filler paragraphs plus round(r * n / (1 - r))
  arithmetic word problems (question + worked solution) so that injected items are a
  fraction r of the training documents; rate 0 is the clean sibling. Which items were
  injected is recorded, so the rest serve as fresh items of the same style.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from mnemoscope.bench.datasets import Document
from mnemoscope.errors import InputError

__all__ = ["SUITES", "ContaminationMix", "arithmetic_text", "contamination_mix", "membership_documents"]

SUITES = ("membership",)


def membership_documents() -> list[Document]:
    """The shipped membership corpus as labelled documents (1 = member)."""
    from mnemoscope.bench.corpus import load_membership

    return [
        Document(id=r["id"], text=r["text"], label=int(r["label"]), meta={"genre": r["genre"]})
        for r in load_membership()
    ]


def arithmetic_text(item: dict[str, str]) -> str:
    """How an arithmetic item appears in training text: the question and its worked solution."""
    return f"Question: {item['question']}\nAnswer: {item['solution']}"


@dataclass(frozen=True)
class ContaminationMix:
    texts: list[str]
    injected_ids: list[str]
    filler_ids: list[str]
    rate: float


def contamination_mix(rate: float, *, n_filler: int = 300, seed: int = 0) -> ContaminationMix:
    """Filler documents with arithmetic items injected at ``rate`` of the mixture (shuffled, seeded)."""
    from mnemoscope.bench.corpus import load_arithmetic, load_filler

    if not 0 <= rate < 1:
        raise InputError(f"contamination rate must be in [0, 1), got {rate}", field="rate")
    filler = load_filler()
    if n_filler > len(filler):
        raise InputError(f"n_filler={n_filler} but the filler corpus has {len(filler)} documents")
    arith = load_arithmetic()
    n_inj = round(rate * n_filler / (1 - rate))
    rng = random.Random(seed)
    injected = rng.sample(arith, n_inj)
    chosen_filler = filler[:n_filler]
    items = [(f["id"], f["text"]) for f in chosen_filler] + [(a["id"], arithmetic_text(a)) for a in injected]
    rng.shuffle(items)
    return ContaminationMix(
        texts=[t for _, t in items],
        injected_ids=sorted(a["id"] for a in injected),
        filler_ids=[f["id"] for f in chosen_filler],
        rate=rate,
    )
