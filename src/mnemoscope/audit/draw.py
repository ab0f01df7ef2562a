"""Drawing calibration records until enough of them verify on the model at hand.

A fixed sample (``calibrate --max-records N``) spends the same budget on every model, but how
many of its labels survive verification (:mod:`mnemoscope.bench.label_check`) depends on the
model: a 135M model answers few well-known facts closed-book, an 8B model answers most of them.
:func:`draw_until` instead traces records in rounds and stops when each class has
``per_class`` verified answers (memory = 1, context-needed = 0), the input runs out, or
``max_traced`` records have been traced:

* the records are split into queues by what they can yield: ``memory`` (label 1), ``clean``
  (label 0) and ``conflict`` (a knowledge-conflict item, labelled by the answer the model gives:
  either class). Unlabelled records are never drawn (a class target needs labels);
* each queue is ordered by the record's ``difficulty`` (ascending; records without one after
  those with one) and, within a difficulty, in a seeded random order. Easier facts first is what
  makes the draw cheap on a small model; a large model verifies the hard ones too, and the card
  reports the difficulty mix of what was kept (``draw.kept_by_difficulty``);
* a round draws from the memory queue ``ceil(need_1 / yield_1)`` records and from the clean
  queue ``ceil(need_0 / yield_0)``, where ``need`` is what a class still lacks and ``yield`` the
  share of that queue's traced records that verified into its class so far (1.0 before any is
  traced: the first round never overshoots); the conflict queue gets half of the larger need over
  its own yield. At least ``min_round`` records per drawing queue, so the last rounds do not
  trace one record at a time.

The tracing itself is a callback (``answers_for``), so the in-process calibration and the
endpoint calibration share this one drawing rule; both trace resumably, so a re-run of a
stopped calibration re-traces nothing and draws the same records (the order is seeded). The
callback is called after every round with every record drawn so far and returns their answers
only: the in-process one reads them with :func:`~mnemoscope.trace.store.load_answers`, never the
whole trace folder.

Example:
    >>> recs = [{"id": f"m{i}", "label": 1, "kind": "memorized", "answer": "Paris"} for i in range(6)]
    >>> recs += [{"id": f"c{i}", "label": 0, "kind": "clean", "answer": "Zorblat"} for i in range(6)]
    >>> def answers(chosen):  # every memory item known, every clean one not
    ...     return {r["id"]: ("Paris" if r["label"] else "Zorblat", "Paris" if r["label"] else "?")
    ...             for r in chosen}
    >>> res = draw_until(recs, 3, answers, min_round=1)
    >>> res.stopped, res.verified
    ('target reached', {'memory': 3, 'context': 3})
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mnemoscope.bench.label_check import LabelMode, item_fields, verify_labels
from mnemoscope.errors import InputError

__all__ = ["DrawResult", "draw_for_config", "draw_order", "draw_until", "queue_of"]

#: ``{id: (answer with the context, closed-book answer)}`` of the records a round traced
Answers = Mapping[str, tuple[str, str | None]]


def queue_of(record: Any) -> str:
    """``memory``, ``clean``, ``conflict`` or ``unlabelled``: which class a record can yield."""
    f = item_fields(record)
    if f.get("kind") == "conflict" or f.get("context_answer") is not None:
        return "conflict"
    lab = f.get("label")
    return "memory" if lab == 1 else "clean" if lab == 0 else "unlabelled"


def _difficulty(record: Any) -> float:
    d = item_fields(record).get("difficulty")
    try:
        return float(d) if d is not None else math.inf
    except (TypeError, ValueError):
        return math.inf


def draw_order(records: Sequence[Any], seed: int = 42) -> dict[str, list[int]]:
    """Indices of ``records`` per queue, in the order they are drawn (difficulty ascending, seeded
    random within a difficulty)."""
    rng = np.random.default_rng(seed)
    tie = rng.random(len(records))
    queues: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        queues.setdefault(queue_of(r), []).append(i)
    return {q: sorted(ix, key=lambda i: (_difficulty(records[i]), tie[i])) for q, ix in queues.items()}


@dataclass
class DrawResult:
    """What :func:`draw_until` traced: ``records`` in draw order, one dict per round, why it
    stopped, the verified count per class and per queue."""

    records: list[Any]
    per_class: int
    stopped: str
    verified: dict[str, int]
    rounds: list[dict[str, Any]] = field(default_factory=list)
    by_queue: dict[str, dict[str, int]] = field(default_factory=dict)
    kept_by_difficulty: dict[str, dict[str, int]] = field(default_factory=dict)
    available: dict[str, int] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """The ``draw`` block of a profile header (JSON-able)."""
        return {
            "rule": "per-class target; queues by difficulty ascending, seeded; yield-adjusted rounds",
            "per_class": self.per_class,
            "stopped": self.stopped,
            "n_drawn": len(self.records),
            "verified": dict(self.verified),
            "available": dict(self.available),
            "by_queue": {q: dict(v) for q, v in self.by_queue.items()},
            "kept_by_difficulty": {q: dict(v) for q, v in self.kept_by_difficulty.items()},
            "rounds": list(self.rounds),
        }


def draw_until(
    records: Sequence[Any],
    per_class: int,
    answers_for: Callable[[list[Any]], Answers],
    *,
    mode: LabelMode = "verify",
    seed: int = 42,
    max_traced: int | None = None,
    min_round: int = 8,
    log: Callable[[str], None] | None = None,
) -> DrawResult:
    """Draw and trace records in rounds until ``per_class`` answers of each class verify.

    Args:
        records: the pool (labelled; ``answer`` needed under ``mode="verify"``).
        per_class: verified answers wanted per class (memory and context-needed).
        answers_for: traces the records it is given (resumably: records traced in an earlier
            round are passed again and must not be re-traced) and returns
            ``{id: (answer_with_context, closed_book_answer)}`` for those it traced (a record
            that failed to trace is simply absent).
        mode: ``verify`` (the labels are checked) or ``given``.
        max_traced: stop once this many records were drawn (``None``: no cap).
        min_round: the smallest draw from a queue that still needs records.
        log: receives one line per round.

    Raises:
        InputError: ``per_class`` < 1, or no labelled record to draw.
    """
    if per_class < 1:
        raise InputError(f"--per-class must be at least 1, got {per_class}")
    order = draw_order(records, seed)
    order.pop("unlabelled", None)
    if not order:
        raise InputError("--per-class needs labelled records (label 0/1 or knowledge conflicts); none found")
    pos = dict.fromkeys(order, 0)
    drawn: list[int] = []
    rounds: list[dict[str, Any]] = []
    verified = {"memory": 0, "context": 0}
    by_queue: dict[str, dict[str, int]] = {}
    kept_diff: dict[str, dict[str, int]] = {}
    stopped = ""
    while True:
        if drawn:
            chosen = [records[i] for i in drawn]
            answers = answers_for(chosen)
            traced = [r for r in chosen if str(item_fields(r)["id"]) in answers]
            check = verify_labels(traced, answers, mode=mode) if traced else None
            verified = {"memory": 0, "context": 0}
            by_queue = {q: {"drawn": pos[q], "traced": 0, "memory": 0, "context": 0} for q in order}
            kept_diff = {}
            for r, d in zip(traced, check.decisions if check else [], strict=True):
                q = queue_of(r)
                by_queue[q]["traced"] += 1
                if d.label in (0, 1):
                    cls = "memory" if d.label == 1 else "context"
                    verified[cls] += 1
                    by_queue[q][cls] += 1
                    dk = str(_difficulty(r)) if math.isfinite(_difficulty(r)) else "none"
                    kept_diff.setdefault(cls, {}).setdefault(dk, 0)
                    kept_diff[cls][dk] += 1
            rounds[-1].update({"traced": len(traced), "verified": dict(verified)})
            if log:
                log(
                    f"draw round {len(rounds)}: {len(drawn)} drawn, {len(traced)} traced, verified "
                    f"{verified['memory']} memory / {verified['context']} context (target {per_class} each)"
                )
        need = {
            "memory": max(0, per_class - verified["memory"]),
            "context": max(0, per_class - verified["context"]),
        }
        if not any(need.values()):
            stopped = "target reached"
            break
        budget = math.inf if max_traced is None else max_traced - len(drawn)
        if budget <= 0:
            stopped = f"--max-records {max_traced} reached"
            break

        def rate(q: str, cls: str | None, by_queue: dict[str, dict[str, int]] = by_queue) -> float:
            b = by_queue.get(q)
            if not b or not b["traced"]:
                return 1.0  # nothing traced yet: assume every record verifies (never overshoot)
            k = b["memory"] + b["context"] if cls is None else b[cls]
            return max(k / b["traced"], 0.05)

        plan: dict[str, int] = {}
        if need["memory"] and "memory" in order:
            plan["memory"] = math.ceil(need["memory"] / rate("memory", "memory"))
        if need["context"] and "clean" in order:
            plan["clean"] = math.ceil(need["context"] / rate("clean", "context"))
        if "conflict" in order:
            plan["conflict"] = math.ceil(max(need.values()) / 2 / rate("conflict", None))
        new: dict[str, int] = {}
        for q, n in plan.items():
            n = min(max(n, min_round), len(order[q]) - pos[q])
            n = int(min(n, budget - sum(new.values())))
            if n > 0:
                new[q] = n
        if not new:
            stopped = "data exhausted"
            break
        for q, n in new.items():
            drawn += order[q][pos[q] : pos[q] + n]
            pos[q] += n
        rounds.append({"round": len(rounds) + 1, "drawn": dict(new), "need": dict(need)})
    available = {q: len(ix) for q, ix in order.items()}
    return DrawResult(
        records=[records[i] for i in drawn],
        per_class=per_class,
        stopped=stopped,
        verified=verified,
        rounds=rounds,
        by_queue=by_queue,
        kept_by_difficulty=kept_diff,
        available=available,
    )


def draw_for_config(
    config: Any, records: Sequence[Any], answers_for: Callable[[list[Any]], Answers], *, progress: bool
) -> DrawResult:
    """:func:`draw_until` with a calibration config's settings (``per_class``, ``labels``, ``seed``,
    ``max_traced``: :class:`~mnemoscope.audit.profile.CalibrationConfig` and the endpoint's),
    one line per round on stderr when ``progress``."""
    import sys

    return draw_until(
        records,
        config.per_class,
        answers_for,
        mode=config.labels,
        seed=config.seed,
        max_traced=config.max_traced,
        log=(lambda m: print(m, file=sys.stderr)) if progress else None,
    )
