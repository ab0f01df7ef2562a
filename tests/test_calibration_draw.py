"""``calibrate --per-class N``: records drawn in rounds until N answers per class verify (issue 27).

The drawing rule is pure (a scripted "model" stands in for the tracing callback); one test runs it
through ``calibrate_profile`` on a tiny random model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mnemoscope.audit.draw import draw_order, draw_until, queue_of
from mnemoscope.errors import InputError


def _pool(n_per_diff: int = 30) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for d in (3, 1, 2):  # deliberately not in difficulty order
        for i in range(n_per_diff):
            items.append(
                {"id": f"m{d}-{i}", "label": 1, "kind": "memorized", "difficulty": d, "answer": "Paris"}
            )
    for i in range(60):
        items.append({"id": f"c{i}", "label": 0, "kind": "clean", "answer": "Zorblat"})
    for i in range(20):
        items.append(
            {"id": f"x{i}", "kind": "conflict", "answer": "Paris", "context_answer": "Lyon", "difficulty": 1}
        )
    items.append({"id": "u0", "kind": "other"})  # unlabelled: never drawn
    return items


class ScriptedModel:
    """Knows every difficulty-1 fact, every other difficulty-2 fact, no difficulty-3 one; repeats
    the context's answer for clean items except every 4th; follows 3 of 4 conflicting contexts.
    Counts how often each record is traced (a resumable tracer traces each once)."""

    def __init__(self) -> None:
        self.traced: dict[str, int] = {}

    def knows(self, r: dict[str, Any]) -> bool:
        if r["kind"] == "conflict":
            return int(r["id"][1:]) % 4 == 0
        d, i = r["difficulty"], int(r["id"].split("-")[1])
        return d == 1 or (d == 2 and i % 2 == 0)

    def __call__(self, chosen: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
        out = {}
        for r in chosen:
            if r["id"] not in self.traced:
                self.traced[r["id"]] = 1
            if r["kind"] == "clean":
                out[r["id"]] = ("Zorblat" if int(r["id"][1:]) % 4 else "no idea", "no idea")
            elif r["kind"] == "conflict":
                out[r["id"]] = ("Paris" if self.knows(r) else "Lyon", "Paris")
            else:
                known = self.knows(r)
                out[r["id"]] = ("Paris", "Paris" if known else "no idea")
        return out


def test_queues_are_ordered_easiest_first_and_seeded() -> None:
    pool = _pool()
    order = draw_order(pool, seed=3)
    assert set(order) == {"memory", "clean", "conflict", "unlabelled"}
    diffs = [pool[i]["difficulty"] for i in order["memory"]]
    assert diffs == sorted(diffs)
    assert order == draw_order(pool, seed=3)
    assert order["memory"][:30] != draw_order(pool, seed=4)["memory"][:30]  # seeded within a difficulty
    assert queue_of({"label": 1}) == "memory" and queue_of({"context_answer": "x"}) == "conflict"


def test_draw_reaches_the_target_without_tracing_anything_twice() -> None:
    model = ScriptedModel()
    res = draw_until(_pool(), 40, model, seed=0, min_round=4)
    assert res.stopped == "target reached"
    assert res.verified["memory"] >= 40 and res.verified["context"] >= 40
    ids = [r["id"] for r in res.records]
    assert len(ids) == len(set(ids)) == len(model.traced)
    assert "u0" not in ids
    # easiest first: the 30 difficulty-1 facts are all drawn before any difficulty-3 one
    memory = [r for r in res.records if r["kind"] == "memorized"]
    first3 = next((k for k, r in enumerate(memory) if r["difficulty"] == 3), len(memory))
    assert all(r["difficulty"] < 3 for r in memory[:first3]) and first3 >= 30
    # yield-adjusted rounds: clean verifies 3 of 4, so about 4/3 x the need is drawn, not the whole queue
    assert res.summary()["by_queue"]["clean"]["drawn"] < 60
    s = res.summary()
    assert s["rounds"][0]["need"] == {"memory": 40, "context": 40}
    assert s["kept_by_difficulty"]["memory"]["1.0"] == 30 + 5  # 30 facts + 5 conflicts the model knows


def test_draw_stops_at_the_cap_and_when_the_data_runs_out() -> None:
    capped = draw_until(_pool(), 40, ScriptedModel(), max_traced=25, min_round=4)
    assert capped.stopped == "--max-records 25 reached" and len(capped.records) == 25
    exhausted = draw_until(_pool(5), 100, ScriptedModel(), min_round=4)
    assert exhausted.stopped == "data exhausted"
    assert len(exhausted.records) == 15 + 60 + 20  # every labelled record, once
    with pytest.raises(InputError, match="labelled"):
        draw_until([{"id": "a"}], 5, ScriptedModel())
    with pytest.raises(InputError, match="at least 1"):
        draw_until(_pool(), 0, ScriptedModel())


def test_a_rerun_draws_the_same_records() -> None:
    a = draw_until(_pool(), 30, ScriptedModel(), seed=7)
    b = draw_until(_pool(), 30, ScriptedModel(), seed=7)
    assert [r["id"] for r in a.records] == [r["id"] for r in b.records]


def test_calibrate_profile_draws_per_class_and_records_it(tmp_path: Path) -> None:
    from helpers import tiny_lm, zor_records
    from mnemoscope.audit.calibrate import calibrate_profile
    from mnemoscope.audit.profile import CalibrationConfig

    lm = tiny_lm(layers=2)
    recs = zor_records(80)
    cfg = CalibrationConfig(
        max_new_tokens=3, chat=False, labels="given", per_class=12, held_out_fraction=0.25
    )
    prof = calibrate_profile(lm, recs, tmp_path / "p", cfg, progress=False)
    draw = prof.header["draw"]
    assert draw["stopped"] == "target reached"
    assert draw["verified"] == {"memory": 12, "context": 12}
    assert prof.header["data"]["n_traced"] == draw["n_drawn"] == 24 < len(recs)
    assert prof.header["data"]["n_records"] == len(recs)  # the pool the profile was drawn from


# -- a budget instead of a target (issue 35) --------------------------------------------------------


def _hard_pool() -> list[dict[str, Any]]:
    """Mostly hard facts the scripted model does not know (as a small model on the shipped set):
    memory yields ~1/3, clean ~3/4."""
    return _pool(n_per_diff=60)


def test_budget_draw_spends_the_budget_and_balances_the_classes():
    model = ScriptedModel()
    res = draw_until(_hard_pool(), None, model, max_traced=120, min_round=4, seed=3)
    assert len(res.records) == 120 and res.stopped == "--max-records 120 reached"
    assert all(v == 1 for v in model.traced.values())  # resumable: each record traced once
    # a fixed stratified sample would keep ~1/3 of its memory half; the budget draw balances them
    m, c = res.verified["memory"], res.verified["context"]
    assert abs(m - c) <= max(4, 0.2 * max(m, c)), res.verified
    # easiest first: every kept memory answer is of difficulty 1 or 2 (the model knows no 3)
    assert set(res.kept_by_difficulty["memory"]) <= {"1.0", "2.0"}
    assert len(res.rounds) >= 2 and res.summary()["budget"]["max_records"] == 120
    assert res.summary()["per_class"] is None and "budget" in res.summary()["rule"]


def test_budget_draw_beats_a_fixed_sample_on_the_smaller_class():
    import random

    pool = _hard_pool()
    res = draw_until(pool, None, ScriptedModel(), max_traced=90, min_round=4, seed=0)
    # the stratified fixed sample of the same size: half memory, half clean, at random
    rng = random.Random(0)
    mem = [r for r in pool if r.get("label") == 1]
    fixed = rng.sample(mem, 45)
    known = sum(ScriptedModel().knows(r) for r in fixed)
    assert min(res.verified.values()) > known


def test_forecast_after_the_pilot_round_names_what_the_budget_buys():
    seen: list[Any] = []
    res = draw_until(_hard_pool(), None, ScriptedModel(), max_traced=60, min_round=4, on_forecast=seen.append)
    assert len(seen) == 1 and res.forecast is seen[0]
    f = seen[0]
    assert f.records == 60 and 0 < f.yields["memory"] <= 1 and "upper bound" in f.describe()
    # 60 records cannot give 10 held-out answers of each class and 19 conformal clean ones
    assert not (f.certifiable and f.validatable)
    assert f.records_for_valid_card is not None and f.records_for_valid_card > 60
    assert "would be needed" in f.describe() and "marked" in f.describe()
    big = draw_until(_hard_pool(), None, ScriptedModel(), max_traced=400, min_round=4).forecast
    assert big is not None and big.certifiable and big.validatable
    assert "a certified, validated card is expected" in big.describe()


def test_time_budget_stops_at_the_measured_rate():
    t = [0.0]

    def clock() -> float:
        return t[0]

    model = ScriptedModel()

    def slow(chosen: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
        t[0] += 0.5 * sum(r["id"] not in model.traced for r in chosen)  # 0.5 s per new record
        return model(chosen)

    res = draw_until(_hard_pool(), None, slow, budget_seconds=30.0, min_round=4, clock=clock)
    assert res.stopped.startswith("--budget 0.5 min reached")
    assert 40 <= len(res.records) <= 64, len(res.records)  # 60 records' worth, minus the last round's slack
    assert res.budget is not None and res.budget["seconds_spent"] <= 30.0 + 0.5 * 4 * 4


def test_budget_draw_refuses_no_budget_and_a_bad_budget():
    with pytest.raises(InputError, match="needs --max-records or --budget"):
        draw_until(_hard_pool(), None, ScriptedModel())
    with pytest.raises(InputError, match="--budget must be positive"):
        draw_until(_hard_pool(), None, ScriptedModel(), budget_seconds=0.0)


def test_per_class_draw_also_forecasts():
    seen: list[Any] = []
    res = draw_until(_pool(), 20, ScriptedModel(), min_round=4, on_forecast=seen.append)
    assert res.stopped == "target reached" and len(seen) == 1
    assert seen[0].records >= len(res.rounds[0]["drawn"])
