"""Drawing calibration records until enough of them verify on the model at hand.

A fixed sample (``calibrate --max-records N``) spends the same budget on every model, but how
many of its labels survive verification (:mod:`mnemoscope.bench.label_check`) depends on the
model: a 135M model answers few well-known facts closed-book, an 8B model answers most of them.
:func:`draw_until` instead traces records in rounds and stops when each class has
``per_class`` verified answers (memory = 1, context-needed = 0), the input runs out, or
``max_traced`` records have been traced:

* the records are split into queues by what they can yield: ``memory`` (label 1), ``clean``
  (label 0), ``conflict`` (a knowledge-conflict item, labelled by the answer the model gives:
  either class) and ``real`` (``kind: "real"``, a real passage and question such as SQuAD's,
  :mod:`mnemoscope.bench.public_data`: no label of its own, labelled by the model's closed-book
  and open-book answers, :mod:`mnemoscope.bench.label_check`: either class too). Other
  unlabelled records are never drawn (a class target needs labels);
* each queue is ordered by the record's ``difficulty`` (ascending; records without one after
  those with one) and, within a difficulty, in a seeded random order. Easier facts first is what
  makes the draw cheap on a small model; a large model verifies the hard ones too, and the card
  reports the difficulty mix of what was kept (``draw.kept_by_difficulty``);
* a round draws from the memory queue ``ceil(need_1 / yield_1)`` records and from the clean
  queue ``ceil(need_0 / yield_0)``, where ``need`` is what a class still lacks and ``yield`` the
  share of that queue's traced records that verified into its class so far (1.0 before any is
  traced: the first round never overshoots); the conflict queue gets half of the larger need over
  its own yield, shared with the real queue when both are there (:data:`EITHER_QUEUES`: each
  gets its part of that half over its own yield). At least ``min_round`` records per drawing queue, so the last rounds do not
  trace one record at a time.

**A budget instead of a target** (``per_class=None``; ``calibrate --max-records N`` alone, or
``--budget MINUTES``): the same queues, easiest first, but no class target. Each round spends part
of what is left of the budget (records, or seconds at the rate measured so far) and splits it
between the memory and clean queues so that the two verified counts end as equal as the yields
allow (the smaller class first); knowledge conflicts and real items each get their share of
the pool, at most a quarter each. After the first (pilot) round the yields are known, and :func:`expected_card` projects
what the whole budget will buy: verified answers per class, the held-out and conformal counts,
whether alpha can be certified and the card validated, and how many records a validated card
would need. ``calibrate`` prints that projection before it spends the rest.

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
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mnemoscope.bench.label_check import LabelMode, item_fields, verify_labels
from mnemoscope.errors import InputError

__all__ = [
    "EITHER_QUEUES",
    "CardForecast",
    "DrawResult",
    "draw_for_config",
    "draw_order",
    "draw_until",
    "expected_card",
    "queue_of",
]

#: ``{id: (answer with the context, closed-book answer)}`` of the records a round traced
Answers = Mapping[str, tuple[str, str | None]]

#: queues whose records the model's answers label into either class (the others yield one class)
EITHER_QUEUES = ("conflict", "real")


def queue_of(record: Any) -> str:
    """``memory``, ``clean``, ``conflict``, ``real`` or ``unlabelled``: which class a record can yield."""
    f = item_fields(record)
    if f.get("kind") == "conflict" or f.get("context_answer") is not None:
        return "conflict"
    if f.get("kind") == "real":
        return "real"
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
    per_class: int | None
    stopped: str
    verified: dict[str, int]
    rounds: list[dict[str, Any]] = field(default_factory=list)
    by_queue: dict[str, dict[str, int]] = field(default_factory=dict)
    kept_by_difficulty: dict[str, dict[str, int]] = field(default_factory=dict)
    available: dict[str, int] = field(default_factory=dict)
    budget: dict[str, Any] | None = None
    forecast: CardForecast | None = None

    def summary(self) -> dict[str, Any]:
        """The ``draw`` block of a profile header (JSON-able)."""
        rule = (
            "per-class target; queues by difficulty ascending, seeded; yield-adjusted rounds"
            if self.per_class is not None
            else "budget, classes balanced; queues by difficulty ascending, seeded; yield-adjusted rounds"
        )
        return {
            "rule": rule,
            "per_class": self.per_class,
            "budget": self.budget,
            "forecast": self.forecast.to_dict() if self.forecast else None,
            "stopped": self.stopped,
            "n_drawn": len(self.records),
            "verified": dict(self.verified),
            "available": dict(self.available),
            "by_queue": {q: dict(v) for q, v in self.by_queue.items()},
            "kept_by_difficulty": {q: dict(v) for q, v in self.kept_by_difficulty.items()},
            "rounds": list(self.rounds),
        }


@dataclass(frozen=True)
class CardForecast:
    """What a calibration can expect from its draw, projected from the yields measured so far.

    ``records`` is the whole draw the projection assumes (the budget, or what the per-class target
    needs), ``memory``/``context`` the verified answers it should give, ``held_out`` and
    ``conformal`` what the validation and the threshold would get of them. ``certifiable``: the
    conformal clean answers are enough to certify ``alpha``; ``validatable``: the held-out part has
    :data:`~mnemoscope.audit.validation.MIN_HELD_OUT_PER_CLASS` answers of each class.
    ``records_for_valid_card`` is the smallest draw expected to give both (``None`` when a queue
    yields nothing), ``seconds`` the projected tracing time at the rate measured so far.
    """

    records: int
    yields: dict[str, float]
    memory: int
    context: int
    held_out: dict[str, int]
    conformal: int
    alpha: float
    certifiable: bool
    validatable: bool
    records_for_valid_card: int | None
    seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    def describe(self) -> str:
        """One paragraph a person reads before the rest of the budget is spent."""
        y = ", ".join(f"{k} {v:.2f}" for k, v in self.yields.items())
        t = f" (~{self.seconds / 60:.0f} min of tracing)" if self.seconds is not None else ""
        out = (
            f"expected from {self.records} records{t}: ~{self.memory} memory and ~{self.context} context-needed "
            f"answers verified (yields so far, easiest facts first, so an upper bound for the harder ones "
            f"to come: {y}); held out ~{self.held_out['memory']}/{self.held_out['context']}, "
            f"~{self.conformal} clean answers to certify alpha={self.alpha:g}"
        )
        problems = []
        if not self.certifiable:
            problems.append(f"too few to certify alpha={self.alpha:g}")
        if not self.validatable:
            problems.append("too few held out to validate the card")
        if not problems:
            return out + ": a certified, validated card is expected."
        need = (
            f"; about {self.records_for_valid_card} records would be needed"
            if self.records_for_valid_card is not None
            else "; no budget would do: a queue verifies nothing on this model"
        )
        return out + ": " + " and ".join(problems) + " - the profile will be marked" + need + "."


def _split(
    n: int, v_mem: float, v_ctx: float, y_mem: float, y_ctx: float, avail: dict[str, int]
) -> dict[str, int]:
    """Records for the memory and clean queues out of ``n``, so that the expected verified counts
    ``v + y * drawn`` end as equal as possible (the smaller class first), within what each queue
    still holds."""
    has_m, has_c = avail.get("memory", 0) > 0, avail.get("clean", 0) > 0
    if not has_m and not has_c:
        return {}
    if not has_m or not has_c:
        q = "memory" if has_m else "clean"
        return {q: min(n, avail[q])}
    a_m = (v_ctx - v_mem + y_ctx * n) / (y_mem + y_ctx)
    a_m = round(min(max(a_m, 0.0), n))
    a_m = min(a_m, avail["memory"])
    a_c = min(n - a_m, avail["clean"])
    a_m = min(n - a_c, avail["memory"])  # what the clean queue could not take goes back
    return {q: k for q, k in (("memory", a_m), ("clean", a_c)) if k > 0}


def _conflict_share(n: int, avail: dict[str, int], pool: dict[str, int], queue: str = "conflict") -> int:
    """A budget round's records of an either-class queue (knowledge conflicts, real items): their
    share of the labelled pool, at most a quarter."""
    if not avail.get(queue):
        return 0
    total = sum(pool.values()) or 1
    return min(avail[queue], int(n * min(0.25, pool.get(queue, 0) / total)))


def _either_shares(n: int, avail: dict[str, int], pool: dict[str, int]) -> dict[str, int]:
    """:func:`_conflict_share` of each of :data:`EITHER_QUEUES` (those with a share only)."""
    out = {q: _conflict_share(n, avail, pool, q) for q in EITHER_QUEUES}
    return {q: k for q, k in out.items() if k > 0}


def expected_card(
    records: int,
    verified: dict[str, int],
    drawn: int,
    yields: dict[str, float],
    avail: dict[str, int],
    pool: dict[str, int],
    *,
    held_out_fraction: float = 1 / 3,
    conformal_fraction: float = 0.5,
    alpha: float = 0.05,
    seconds_per_record: float | None = None,
) -> CardForecast:
    """Project a draw of ``records`` in all from ``verified`` answers after ``drawn`` records, the
    queues' ``yields`` (``memory``: memory answers per memory record, ``clean``: context-needed per
    clean record, ``conflict_memory``/``conflict_context`` per conflict record, ``real_memory``/
    ``real_context`` per real record) and what each
    queue still holds (``avail``; ``pool``: the queues' sizes). A pure function: see
    :class:`CardForecast`.

    Example:
        >>> f = expected_card(120, {"memory": 4, "context": 11}, 24, {"memory": 0.33, "clean": 0.92},
        ...                   {"memory": 500, "clean": 500}, {"memory": 512, "clean": 512})
        >>> (f.memory, f.context, f.certifiable, f.validatable, f.records_for_valid_card)
        (29, 29, False, False, 153)
    """
    from mnemoscope.audit.validation import MIN_HELD_OUT_PER_CLASS
    from mnemoscope.stats.conformal import min_n_for_alpha

    left = max(0, records - drawn)
    y_m, y_c = yields.get("memory", 0.0), yields.get("clean", 0.0)
    shares = _either_shares(left, avail, pool)
    v_m = verified.get("memory", 0) + sum(yields.get(f"{q}_memory", 0.0) * a for q, a in shares.items())
    v_c = verified.get("context", 0) + sum(yields.get(f"{q}_context", 0.0) * a for q, a in shares.items())
    plan = _split(left - sum(shares.values()), v_m, v_c, max(y_m, 1e-9), max(y_c, 1e-9), avail)
    mem = int(v_m + y_m * plan.get("memory", 0))
    ctx = int(v_c + y_c * plan.get("clean", 0))
    ho = {"memory": int(mem * held_out_fraction), "context": int(ctx * held_out_fraction)}
    conformal = round((ctx - ho["context"]) * conformal_fraction)
    need_conf = min_n_for_alpha(alpha)
    certifiable = conformal >= need_conf
    validatable = min(ho.values()) >= MIN_HELD_OUT_PER_CLASS
    # the smallest draw expected to give both: verified counts per class, then records per queue
    per_m = math.ceil(MIN_HELD_OUT_PER_CLASS / held_out_fraction) if held_out_fraction > 0 else 0
    per_c = max(per_m, math.ceil(need_conf / conformal_fraction / (1 - held_out_fraction)))
    valid: int | None = None
    if y_m > 0 and y_c > 0:
        valid = drawn + max(0, math.ceil((per_m - verified.get("memory", 0)) / y_m))
        valid += max(0, math.ceil((per_c - verified.get("context", 0)) / y_c))
    return CardForecast(
        records=records,
        yields={k: round(v, 3) for k, v in yields.items()},
        memory=mem,
        context=ctx,
        held_out=ho,
        conformal=conformal,
        alpha=alpha,
        certifiable=certifiable,
        validatable=validatable,
        records_for_valid_card=valid,
        seconds=None if seconds_per_record is None else round(seconds_per_record * records, 1),
    )


def draw_until(
    records: Sequence[Any],
    per_class: int | None,
    answers_for: Callable[[list[Any]], Answers],
    *,
    mode: LabelMode = "verify",
    seed: int = 42,
    max_traced: int | None = None,
    budget_seconds: float | None = None,
    min_round: int = 8,
    log: Callable[[str], None] | None = None,
    on_forecast: Callable[[CardForecast], None] | None = None,
    held_out_fraction: float = 1 / 3,
    alpha: float = 0.05,
    clock: Callable[[], float] = time.monotonic,
) -> DrawResult:
    """Draw and trace records in rounds until ``per_class`` answers of each class verify, or, with
    ``per_class=None``, until the budget (``max_traced`` records and/or ``budget_seconds`` of
    tracing) is spent, with the two classes balanced.

    Args:
        records: the pool (labelled; ``answer`` needed under ``mode="verify"``).
        per_class: verified answers wanted per class (memory and context-needed); ``None``: as
            many as the budget buys, balanced.
        answers_for: traces the records it is given (resumably: records traced in an earlier
            round are passed again and must not be re-traced) and returns
            ``{id: (answer_with_context, closed_book_answer)}`` for those it traced (a record
            that failed to trace is simply absent).
        mode: ``verify`` (the labels are checked) or ``given``.
        max_traced: stop once this many records were drawn (``None``: no cap).
        budget_seconds: stop drawing once the rounds' tracing has taken this long, or when the
            next round would not fit at the rate measured so far.
        min_round: the smallest draw from a queue that still needs records.
        log: receives one line per round.
        on_forecast: receives the :func:`expected_card` projection after the first round (before
            the rest of the budget is spent).
        held_out_fraction, alpha: the calibration's, for the projection.
        clock: seconds (tests pass a fake one).

    Raises:
        InputError: ``per_class`` < 1, a budget draw without a budget, or no labelled record.
    """
    if per_class is not None and per_class < 1:
        raise InputError(f"--per-class must be at least 1, got {per_class}")
    if per_class is None and max_traced is None and budget_seconds is None:
        raise InputError("a budget draw needs --max-records or --budget")
    if budget_seconds is not None and budget_seconds <= 0:
        raise InputError(f"--budget must be positive, got {budget_seconds / 60:g} minutes", field="budget")
    order = draw_order(records, seed)
    order.pop("unlabelled", None)
    if not order:
        raise InputError("drawing needs labelled records (label 0/1 or knowledge conflicts); none found")
    pool = {q: len(ix) for q, ix in order.items()}
    pos = dict.fromkeys(order, 0)
    drawn: list[int] = []
    rounds: list[dict[str, Any]] = []
    verified = {"memory": 0, "context": 0}
    by_queue: dict[str, dict[str, int]] = {}
    kept_diff: dict[str, dict[str, int]] = {}
    stopped = ""
    spent = 0.0  # seconds in answers_for
    forecast: CardForecast | None = None

    def rate(q: str, cls: str | None, floor: float = 0.05) -> float:
        b = by_queue.get(q)
        if not b or not b["traced"]:
            return 1.0  # nothing traced yet: assume every record verifies (never overshoot)
        k = b["memory"] + b["context"] if cls is None else b[cls]
        return max(k / b["traced"], floor)

    def yields() -> dict[str, float]:
        out = {"memory": rate("memory", "memory", 0.0), "clean": rate("clean", "context", 0.0)}
        for q in EITHER_QUEUES:
            if q in order:
                out[f"{q}_memory"] = rate(q, "memory", 0.0)
                out[f"{q}_context"] = rate(q, "context", 0.0)
        return out

    while True:
        if drawn:
            chosen = [records[i] for i in drawn]
            t0 = clock()
            answers = answers_for(chosen)
            spent += clock() - t0
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
            rounds[-1].update({"traced": len(traced), "verified": dict(verified), "seconds": round(spent, 1)})
            target = f"target {per_class} each" if per_class is not None else "budget, balanced"
            if log:
                log(
                    f"draw round {len(rounds)}: {len(drawn)} drawn, {len(traced)} traced, verified "
                    f"{verified['memory']} memory / {verified['context']} context ({target})"
                )
            if len(rounds) == 1:
                per_rec = spent / len(drawn) if spent > 0 else None
                total = _projected_total(
                    per_class, max_traced, budget_seconds, per_rec, verified, len(drawn), rate
                )
                avail = {q: len(order[q]) - pos[q] for q in order}
                forecast = expected_card(
                    total,
                    verified,
                    len(drawn),
                    yields(),
                    avail,
                    pool,
                    held_out_fraction=held_out_fraction,
                    alpha=alpha,
                    seconds_per_record=per_rec,
                )
                if on_forecast:
                    on_forecast(forecast)
        if per_class is not None:
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
        if budget_seconds is not None and drawn:
            per_rec = spent / len(drawn) if spent > 0 else 0.0
            left_s = budget_seconds - spent
            if left_s <= 0 or (per_rec > 0 and left_s < per_rec * min_round):
                stopped = f"--budget {budget_seconds / 60:g} min reached"
                break
            if per_rec > 0:
                budget = min(budget, int(left_s / per_rec))
        avail = {q: len(order[q]) - pos[q] for q in order}
        new: dict[str, int] = {}
        if per_class is not None:
            plan: dict[str, int] = {}
            if need["memory"] and "memory" in order:
                plan["memory"] = math.ceil(need["memory"] / rate("memory", "memory"))
            if need["context"] and "clean" in order:
                plan["clean"] = math.ceil(need["context"] / rate("clean", "context"))
            either = [q for q in EITHER_QUEUES if q in order]
            for q in either:  # half of the larger need, shared by the either-class queues
                plan[q] = math.ceil(max(need.values()) / 2 / len(either) / rate(q, None))
            for q, n in plan.items():
                n = min(max(n, min_round), avail[q])
                n = int(min(n, budget - sum(new.values())))
                if n > 0:
                    new[q] = n
        else:
            size = _round_size(budget, len(drawn), min_round, budget_seconds is not None and not drawn)
            shares = _either_shares(size, avail, pool)
            # what the round's conflicts and real items are expected to add to each class (0 without any)
            v_m = verified["memory"] + sum(rate(q, "memory", 0.0) * a for q, a in shares.items())
            v_c = verified["context"] + sum(rate(q, "context", 0.0) * a for q, a in shares.items())
            new = _split(
                size - sum(shares.values()),
                v_m,
                v_c,
                rate("memory", "memory"),
                rate("clean", "context"),
                avail,
            )
            new.update(shares)
        if not new:
            stopped = "data exhausted"
            break
        for q, n in new.items():
            drawn += order[q][pos[q] : pos[q] + n]
            pos[q] += n
        rnd: dict[str, Any] = {"round": len(rounds) + 1, "drawn": dict(new)}
        if per_class is not None:
            rnd["need"] = dict(need)
        rounds.append(rnd)
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
        budget=None
        if per_class is not None
        else {"max_records": max_traced, "seconds": budget_seconds, "seconds_spent": round(spent, 1)},
        forecast=forecast,
    )


def _round_size(budget: float, n_drawn: int, min_round: int, time_only_pilot: bool) -> int:
    """A budget round: a pilot of a quarter of the budget (at least two minimal rounds), then half
    of what is left, then the rest once it is small; a time budget's pilot (no rate yet) is four
    minimal rounds."""
    if time_only_pilot and math.isinf(budget):
        return 4 * min_round
    b = int(budget) if not math.isinf(budget) else 4 * min_round
    if n_drawn == 0:
        return min(b, max(2 * min_round, math.ceil(b / 4)))
    if b <= 4 * min_round:
        return b
    return max(2 * min_round, math.ceil(b / 2))


def _projected_total(
    per_class: int | None,
    max_traced: int | None,
    budget_seconds: float | None,
    per_record: float | None,
    verified: dict[str, int],
    n_drawn: int,
    rate: Callable[[str, str | None], float],
) -> int:
    """The whole draw a forecast assumes: the budget (records, or seconds at the measured rate),
    or what the per-class target needs at the yields so far, capped by ``max_traced``."""
    caps = []
    if max_traced is not None:
        caps.append(max_traced)
    if budget_seconds is not None and per_record:
        caps.append(int(budget_seconds / per_record))
    if per_class is not None:
        need = n_drawn
        need += math.ceil(max(0, per_class - verified["memory"]) / rate("memory", "memory"))
        need += math.ceil(max(0, per_class - verified["context"]) / rate("clean", "context"))
        caps.append(need)
    return min(caps) if caps else n_drawn


def draw_for_config(
    config: Any, records: Sequence[Any], answers_for: Callable[[list[Any]], Answers], *, progress: bool
) -> DrawResult:
    """:func:`draw_until` with a calibration config's settings (``per_class``, ``labels``, ``seed``,
    ``max_traced``, ``budget_seconds``, ``held_out_fraction``, ``alpha``:
    :class:`~mnemoscope.audit.profile.CalibrationConfig`), one line per round and the forecast
    after the first round on stderr when ``progress``."""
    import sys

    say = (lambda m: print(m, file=sys.stderr)) if progress else None
    return draw_until(
        records,
        config.per_class,
        answers_for,
        mode=config.labels,
        seed=config.seed,
        max_traced=config.max_traced,
        budget_seconds=getattr(config, "budget_seconds", None),
        log=say,
        on_forecast=(lambda f: print(f.describe(), file=sys.stderr)) if progress else None,
        held_out_fraction=config.held_out_fraction,
        alpha=config.alpha,
    )
