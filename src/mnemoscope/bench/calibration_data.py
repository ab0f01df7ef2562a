"""The shipped calibration set: graded well-known facts, invented facts and knowledge conflicts.

``calibration.jsonl`` (built by ``benchmarks/data/build_calibration_set.py`` from the hand-written
tables in ``benchmarks/data/calibration_tables.py``; described with its counts and what the default
model keeps in ``docs/data.md``) is the ground truth ``mnemoscope calibrate`` verifies on the model
at hand. Input spec: ``shipped:calibration``. Kinds:

* ``memorized`` (label 1): a well-known fact whose context states it (the context and the model's
  memory agree), with a ``difficulty``: 1 = even a ~100M-parameter model should know it,
  2 = a mid-sized model, 3 = only large models;
* ``memorized_paraphrased`` (label 1): the same fact (same ``fact_id``) asked in other words;
* ``clean`` (label 0, ``difficulty`` null): a fact about an invented entity, in the same categories
  and sentence shapes as the real facts, so no model can answer it without the context;
* ``conflict`` (label null): a difficulty-1/2 real fact whose context states a counterfactual
  ``context_answer`` (aliases in ``context_aliases``); ``answer`` is the true one. It is labelled
  on the model by the answer it gives (the known one = memory, the context's = context).

Record schema (one JSON object per line)::

    {"id": "cal-mem-capital-france", "fact_id": "cal-capital-france", "kind": ..., "label": 1|0|null,
     "category": "capital", "difficulty": 1|2|3|null, "subject": "France",
     "context": ..., "query": ..., "answer": "Paris", "aliases": [...],
     "context_answer"?: "Lyon", "context_aliases"?: [...]}

A fact, its paraphrase and its conflict variant share ``fact_id``: split by it.

Example:
    >>> items = load_calibration_items(kinds=["memorized"], max_difficulty=1)
    >>> all(it["label"] == 1 and it["difficulty"] == 1 for it in items)
    True
    >>> from mnemoscope.bench.reliance import answer_matches
    >>> all(answer_matches(it["context"], it) for it in items)
    True
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

from mnemoscope.errors import InputError

__all__ = [
    "CALIBRATION_FILE",
    "KINDS",
    "LABELS",
    "SHIPPED_SPEC",
    "default_path",
    "load_calibration_items",
    "resolve_shipped",
]

CALIBRATION_FILE = "calibration.jsonl"
SHIPPED_SPEC = "shipped:calibration"
KINDS = ("memorized", "memorized_paraphrased", "clean", "conflict")
LABELS: dict[str, int | None] = {"memorized": 1, "memorized_paraphrased": 1, "clean": 0, "conflict": None}


def default_path() -> Path:
    """Path of the shipped ``calibration.jsonl``."""
    return Path(str(resources.files("mnemoscope.bench") / "data" / CALIBRATION_FILE))


def resolve_shipped(spec: str) -> str:
    """``"shipped:calibration"`` -> the shipped file's path; any other spec is returned unchanged."""
    return str(default_path()) if spec == SHIPPED_SPEC else spec


def load_calibration_items(
    kinds: Iterable[str] | None = None, max_difficulty: int | None = None
) -> list[dict[str, Any]]:
    """The shipped calibration records, in file order.

    Args:
        kinds: keep only these kinds (of :data:`KINDS`); ``None`` = all.
        max_difficulty: keep real facts (memorized, paraphrased, conflict) of at most this
            difficulty (1-3); invented (clean) facts have no difficulty and are always kept.

    Raises:
        InputError: an unknown kind or a difficulty outside 1-3.
    """
    wanted = None if kinds is None else list(kinds)
    if wanted is not None:
        bad = [k for k in wanted if k not in KINDS]
        if bad:
            raise InputError(f"unknown calibration kind(s) {bad}; choose from {list(KINDS)}", field="kinds")
    if max_difficulty is not None and max_difficulty not in (1, 2, 3):
        raise InputError(f"max_difficulty must be 1, 2 or 3, not {max_difficulty!r}", field="max_difficulty")
    rows = []
    with default_path().open(encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            if wanted is not None and row["kind"] not in wanted:
                continue
            diff = row.get("difficulty")
            if max_difficulty is not None and diff is not None and diff > max_difficulty:
                continue
            rows.append(row)
    return rows
