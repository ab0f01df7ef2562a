"""Authored word and fact tables of the ground-truth generators, read from ``bench/data/``.

The generators (:mod:`~mnemoscope.bench.corpus`, :mod:`~mnemoscope.bench.reliance`) are code;
the words, names and facts they draw from are data, kept in JSON files next to the shipped
sets. JSON arrays come back as tuples (the tables are immutable), objects as dicts.

>>> t = load_tables("reliance_tables.json")
>>> isinstance(t["capitals"][0], tuple)
True
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["DATA_DIR", "load_tables"]

DATA_DIR = Path(__file__).parent / "data"


def _frozen(obj: Any) -> Any:
    if isinstance(obj, list):
        return tuple(_frozen(x) for x in obj)
    if isinstance(obj, dict):
        return {k: _frozen(v) for k, v in obj.items()}
    return obj


@cache
def load_tables(name: str) -> dict[str, Any]:
    """The tables of one data file (``name`` under ``bench/data/``), arrays as tuples."""
    raw = json.loads((DATA_DIR / name).read_text(encoding="utf-8"))
    return {k: _frozen(v) for k, v in raw.items()}
