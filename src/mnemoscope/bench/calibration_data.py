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

**With real passages** (input spec ``shipped:calibration+public``, :data:`PUBLIC_SPEC`): the
shipped set plus the *calibration* split (by article) of the real SQuAD items built by
``benchmarks/build_public_sets.py`` (:mod:`mnemoscope.bench.public_data`): ``real.jsonl``
(``kind: "real"``, labelled on the model by its closed-book and open-book answers,
:mod:`mnemoscope.bench.label_check`) and ``conflicts.jsonl`` (entity-swap knowledge conflicts).
The files are read from :func:`public_data_dir`; :func:`resolve_shipped` writes the combination
once into the cache (named by the content's hash) and returns its path. The evaluation split is
left out, so benchmarks judge on articles calibration never saw.

Example:
    >>> items = load_calibration_items(kinds=["memorized"], max_difficulty=1)
    >>> all(it["label"] == 1 and it["difficulty"] == 1 for it in items)
    True
    >>> from mnemoscope.bench.reliance import answer_matches
    >>> all(answer_matches(it["context"], it) for it in items)
    True
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

from mnemoscope.errors import InputError

__all__ = [
    "CALIBRATION_FILE",
    "KINDS",
    "LABELS",
    "PUBLIC_DATA_ENV",
    "PUBLIC_FILES",
    "PUBLIC_SPEC",
    "SHIPPED_SPEC",
    "default_path",
    "load_calibration_items",
    "load_public_items",
    "public_data_dir",
    "resolve_shipped",
]

CALIBRATION_FILE = "calibration.jsonl"
SHIPPED_SPEC = "shipped:calibration"
KINDS = ("memorized", "memorized_paraphrased", "clean", "conflict")
LABELS: dict[str, int | None] = {"memorized": 1, "memorized_paraphrased": 1, "clean": 0, "conflict": None}
#: the shipped set plus the calibration split of the real public items
PUBLIC_SPEC = "shipped:calibration+public"
#: where the built public sets are (default: ``benchmarks/data/public`` of the source checkout)
PUBLIC_DATA_ENV = "MNEMOSCOPE_PUBLIC_DATA"
#: the public files a calibration draws from (multi-passage and NQ-open probes are for benchmarks)
PUBLIC_FILES = ("real.jsonl", "conflicts.jsonl")


def default_path() -> Path:
    """Path of the shipped ``calibration.jsonl``."""
    return Path(str(resources.files("mnemoscope.bench") / "data" / CALIBRATION_FILE))


def public_data_dir() -> Path:
    """The built public sets: ``$MNEMOSCOPE_PUBLIC_DATA``, else ``benchmarks/data/public`` of the
    source checkout this package runs from (an editable install; a wheel does not carry them)."""
    env = os.environ.get(PUBLIC_DATA_ENV)
    if env:
        return Path(env).expanduser()
    return Path(__file__).resolve().parents[3] / "benchmarks" / "data" / "public"


def load_public_items(
    split: str | None = "calibration", folder: str | os.PathLike[str] | None = None
) -> list[dict[str, Any]]:
    """The records of :data:`PUBLIC_FILES` whose ``split`` is ``split`` (``None``: all), in file order.

    Raises:
        InputError: a file is missing (with how to build it) or a line is not a JSON object with
            an ``id`` and a ``split`` (naming the file, line and field).
    """
    base = Path(folder) if folder is not None else public_data_dir()
    out = []
    for name in PUBLIC_FILES:
        path = base / name
        if not path.is_file():
            raise InputError(
                f"{path} not found: build the public sets with `python benchmarks/build_public_sets.py "
                f"--out {base}` (or point {PUBLIC_DATA_ENV} at them)",
                field="data",
            )
        with path.open(encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise InputError(f"invalid JSON: {e.msg}", record=f"{name} line {n}") from e
                if not isinstance(row, dict) or "id" not in row:
                    raise InputError("missing field", record=f"{name} line {n}", field="id")
                if "split" not in row:
                    raise InputError("missing field", record=f"{row['id']} ({name} line {n})", field="split")
                if split is None or row["split"] == split:
                    out.append(row)
    return out


def resolve_shipped(spec: str) -> str:
    """``"shipped:calibration"`` -> the shipped file's path; ``"shipped:calibration+public"`` -> a
    file in the cache holding the shipped set and the public calibration split
    (:func:`load_public_items`), written once; any other spec is returned unchanged."""
    if spec == SHIPPED_SPEC:
        return str(default_path())
    if spec != PUBLIC_SPEC:
        return spec
    from mnemoscope.paths import cache_dir

    shipped = default_path().read_bytes()
    public = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in load_public_items("calibration"))
    body = shipped + (b"" if shipped.endswith(b"\n") else b"\n") + public.encode("utf-8")
    digest = hashlib.sha256(body).hexdigest()[:16]
    out = cache_dir() / "calibration" / f"calibration+public-{digest}.jsonl"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(body)
        tmp.replace(out)
    return str(out)


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
