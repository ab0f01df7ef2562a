"""benchmarks/bench_passage_attribution.py: a smoke run on two hand-made items with the tiny llama and
its tiny profile (ContextCite with 4 ablations; skipped for ContextCite only when it is not installed),
and its scoring on synthetic rows."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_passage_attribution as bpa  # noqa: E402

HAS_CC = importlib.util.find_spec("context_cite") is not None

ITEMS = [
    {
        "id": "a",
        "query": "Which river is Quenmar on?",
        "answer": "Zorblat",
        "aliases": [],
        "passages": [
            "Harlow has a wool market.",
            "Quenmar lies on the river Zorblat.",
            "The Tessin flows south.",
        ],
        "gold_passage": 1,
    },
    {
        "id": "b",
        "query": "Who founded Velmora?",
        "answer": "Ada Krenshaw",
        "aliases": ["Krenshaw"],
        "passages": ["Velmora was founded by Ada Krenshaw.", "Pellin was founded by Marcus Orlow."],
        "gold_passage": 0,
    },
]


def _write_items(path: Path) -> Path:
    path.write_text("".join(json.dumps(it) + "\n" for it in ITEMS), encoding="utf-8")
    return path


def test_smoke_run_tiny(tiny_service: Any, tmp_path: Path) -> None:
    model_dir, prof = tiny_service
    data = _write_items(tmp_path / "items.jsonl")
    out = tmp_path / "res" / "contextcite.json"
    base = ["--data", str(data), "--out", str(out), "--model", str(model_dir), "--profile", str(prof)]
    base += ["--no-progress", "--num-ablations", "4", "--bootstrap", "50"]
    if not HAS_CC:
        base.append("--no-contextcite")
    bpa.main([*base, "--n", "1"])
    with pytest.raises(SystemExit, match="--resume"):  # an existing rows file is never silently appended to
        bpa.main([*base, "--n", "2"])
    res = bpa.main([*base, "--n", "2", "--resume"])

    rows = [json.loads(x) for x in out.with_suffix(".rows.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == ["a", "b"]
    assert json.loads(out.read_text()) == res
    assert res["n_items"] == 2 and res["format"] == bpa.RESULT_FORMAT
    assert res["machine"]["threads"] == 1 and len(res["machine"]["load_avg_start"]) == 3
    assert res["git"]["commit"] and "bench_passage_attribution.py" in res["provenance"]["command"]
    mn = res["cost"]["mnemoscope"]
    assert mn["n"] == 2 and mn["seconds_mean"]["estimate"] > 0 and mn["forward_calls_mean"] >= 1
    assert mn["cpu_seconds_mean"]["estimate"] > 0
    acc = res["mnemoscope"]["top1_accuracy"]
    assert acc["estimate"] is None or 0.0 <= acc["ci_low"] <= acc["estimate"] <= acc["ci_high"] <= 1.0
    for r in rows:
        m = r["mnemoscope"]
        assert isinstance(m["answer"], str) and m["forwards"]["calls"] >= 1
        assert m["top1"] is None or 0 <= m["top1"] < r["n_passages"]
    if not HAS_CC:
        assert "contextcite" not in res and res["settings"]["contextcite"] is None
        return
    cc = res["cost"]["contextcite"]
    # at least the 4 ablation forwards, plus its generation
    assert cc["n"] == 2 and cc["forward_calls_mean"] >= 4 and cc["seconds_mean"]["estimate"] > 0
    ratio = res["cost"]["ratio_contextcite_over_mnemoscope"]
    assert ratio["seconds"]["estimate"] > 0 and ratio["cpu_seconds"]["estimate"] > 0
    assert res["settings"]["contextcite"]["num_ablations"] == 4
    assert res["answers_agree"]["n"] == 2
    for r in rows:
        c = r["contextcite"]
        assert "failed" in c or len(c["scores"]) == r["n_passages"] == len(c["scores_whole"])
        assert c["top1"] is None or 0 <= c["top1"] < r["n_passages"]
        assert isinstance(r["answers_agree"], bool)


def test_gold_span_and_argmax() -> None:
    import numpy as np

    it = {"answer": "Ada Krenshaw", "aliases": ["Krenshaw"]}
    assert bpa.gold_span("It was ada  Krenshaw.", it) == (7, 20)
    assert bpa.gold_span("Dr Krenshaw did", it) == (3, 11)
    assert bpa.gold_span("Krenshawville", it) is None
    assert bpa._argmax(np.array([0.1, 2.0, -1.0])) == 1
    assert bpa._argmax(np.array([0.0, 0.0])) is None  # LASSO kept nothing: no passage named
    assert bpa._argmax(np.array([1.0, 1.0])) is None  # a tie names none


def test_mnemoscope_top1_reads_the_gold_phrase() -> None:
    it = {"answer": "Zorblat", "aliases": [], "passages": ["x", "y", "z"]}
    audit: dict[str, Any] = {
        "evidence": {
            "answer_words": {
                "words": [
                    {"text": "Tessin", "start": 30, "end": 36, "passages": [2], "passage": 2},
                    {
                        "text": "Zorblat",
                        "start": 10,
                        "end": 17,
                        "passages": [0, 1],
                        "passage": 1,
                        "passage_effect": 3.5,
                    },
                ]
            }
        }
    }
    got = bpa.mnemoscope_top1(audit, "It is the Zorblat, not the Tessin.", it)
    assert got["top1"] == 1 and got["how"] == "phrase" and got["phrase"] == "Zorblat"
    assert got["stating"] == [0, 1] and got["passage_effect"] == 3.5
    zor = audit["evidence"]["answer_words"]["words"][1]
    zor["passage"] = None  # two stating passages and none singled out: no passage named
    assert bpa.mnemoscope_top1(audit, "It is the Zorblat.", it)["top1"] is None
    zor["passages"] = [0]  # one stating passage: that one
    assert bpa.mnemoscope_top1(audit, "It is the Zorblat.", it)["top1"] == 0
    zor["passages"] = []
    audit["evidence"]["passage"] = 2  # the answer-level passage when no phrase names one
    got = bpa.mnemoscope_top1(audit, "It is the Zorblat.", it)
    assert got["top1"] == 2 and got["how"] == "answer"


def _row(
    i: int, mn_top: int | None, cc_top: int | None, mn_ok: bool = True, cc_ok: bool = True
) -> dict[str, Any]:
    fw = {"calls": 10, "rows": 10, "tokens": 100}
    return {
        "id": str(i),
        "gold_passage": 0,
        "n_passages": 2,
        "load1": 1.0,
        "answers_agree": mn_ok == cc_ok,
        "mnemoscope": {"matches": mn_ok, "top1": mn_top, "how": "phrase", "seconds": 1.0, "forwards": fw},
        "contextcite": {
            "matches": cc_ok,
            "top1": cc_top,
            "top1_whole": cc_top,
            "span": [0, 1],
            "seconds": 10.0,
            "seconds_generate": 1.0,
            "forwards": {"calls": 80, "rows": 80, "tokens": 4000},
        },
    }


def test_summarise_scores_only_answers_stating_gold() -> None:
    rows = [_row(0, 0, 0), _row(1, 1, 0), _row(2, None, 1), _row(3, 0, 0, mn_ok=False)]
    s = bpa.summarise(rows, n_resamples=50)
    assert s["n_items"] == 4
    assert s["mnemoscope"]["n_answer_states_gold"] == 3 and s["mnemoscope"]["n_named_no_passage"] == 1
    assert s["mnemoscope"]["top1_accuracy"]["estimate"] == pytest.approx(1 / 3, abs=1e-4)
    assert s["contextcite"]["top1_accuracy"]["estimate"] == pytest.approx(3 / 4)
    assert s["paired"]["n"] == 3 and s["paired"]["contextcite"]["estimate"] == pytest.approx(2 / 3, abs=1e-4)
    assert s["mnemoscope"]["chance"] == 0.5
    r = s["cost"]["ratio_contextcite_over_mnemoscope"]
    assert r["seconds"]["estimate"] == pytest.approx(10.0) and r["forward_calls"] == 8.0
    assert s["answers_agree"]["differ_ids"] == ["3"]


def _earlier_run(tmp_path: Path) -> Path:
    """An earlier run's ContextCite side for ITEMS (rows + the summary next to them), as written by a
    full run: its answers, top-1s, costs and forwards, its command, commit and load."""
    answers = {"a": "Quenmar lies on the river Zorblat.", "b": "It was founded by Ada Krenshaw."}
    rows = []
    for it, top in zip(ITEMS, (1, 0), strict=True):
        rows.append(
            {
                "id": it["id"],
                "gold_passage": it["gold_passage"],
                "n_passages": len(it["passages"]),
                "answer": it["answer"],
                "order": "contextcite-first",
                "load1": 2.5,
                "mnemoscope": {"answer": "something else", "matches": False, "top1": None, "seconds": 9.0},
                "contextcite": {
                    "seconds": 60.0,
                    "seconds_generate": 3.0,
                    "cpu_seconds": 50.0,
                    "response": answers[it["id"]] + "<|im_end|>",
                    "answer": answers[it["id"]],
                    "matches": True,
                    "span": [0, 1],
                    "scores": [0.0] * len(it["passages"]),
                    "top1": top,
                    "top1_whole": top,
                    "forwards": {"calls": 80, "rows": 80, "tokens": 16000},
                    "correct": top == it["gold_passage"],
                },
            }
        )
    rows_path = tmp_path / "earlier" / "contextcite.rows.jsonl"
    rows_path.parent.mkdir()
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    summary = {
        "provenance": {"command": "python benchmarks/bench_passage_attribution.py --n 2", "created": "then"},
        "git": {"commit": "ada733c" + "0" * 33, "dirty": False},
        "machine": {"threads": 1, "load_avg_start": [1.7, 1.9, 2.5], "load1_per_item_mean": 2.5},
        "settings": {"max_new_tokens": 32, "contextcite": {"version": "0.0.4", "num_ablations": 64}},
    }
    (tmp_path / "earlier" / "contextcite.json").write_text(json.dumps(summary), encoding="utf-8")
    return rows_path


def test_reuse_contextcite_remeasures_mnemoscope_only(tiny_service: Any, tmp_path: Path) -> None:
    model_dir, prof = tiny_service
    data = _write_items(tmp_path / "items.jsonl")
    earlier = _earlier_run(tmp_path)
    before = [json.loads(x) for x in earlier.read_text().splitlines()]
    out = tmp_path / "res" / "grounded.json"
    base = ["--data", str(data), "--out", str(out), "--model", str(model_dir), "--profile", str(prof)]
    base += ["--no-progress", "--bootstrap", "50", "--n", "2", "--reuse-contextcite", str(earlier)]
    res = bpa.main(base)

    rows = [json.loads(x) for x in out.with_suffix(".rows.jsonl").read_text().splitlines()]
    assert [json.loads(x) for x in earlier.read_text().splitlines()] == before  # the earlier run untouched
    for r, old in zip(rows, before, strict=True):
        cc, m = r["contextcite"], r["mnemoscope"]
        assert cc["reused"] and cc["run_load1"] == 2.5 and r["order"] == "mnemoscope-only"
        assert {k: cc[k] for k in old["contextcite"]} == old["contextcite"]  # taken as recorded
        # mnemoscope audited ContextCite's answer as given, measured afresh in this run
        assert m["answer_given"] and m["answer"] == old["contextcite"]["answer"] and r["answers_agree"]
        assert m["forwards"]["calls"] >= 1 and m["seconds"] > 0 and m["cpu_seconds"] > 0
    meas = res["measured"]
    assert meas["re_measured"] == ["mnemoscope"] and meas["mnemoscope"]["run"] == "this run"
    assert (
        meas["mnemoscope"]["commit"] == res["git"]["commit"]
        and meas["mnemoscope"]["response"] == "contextcite"
    )
    cc_src = meas["contextcite"]
    assert cc_src["commit"].startswith("ada733c") and cc_src["max_new_tokens"] == 32
    assert cc_src["command"].endswith("--n 2") and cc_src["machine"]["load1_per_item_mean"] == 2.5
    assert (
        res["settings"]["contextcite"]["num_ablations"] == 64
    )  # the earlier run's settings, not this run's flags
    assert "given answer" in res["settings"]["mnemoscope_response"]
    # costs of different runs are never reported as a same-run ratio
    cost = res["cost"]
    assert "ratio_contextcite_over_mnemoscope" not in cost
    across = cost["ratio_across_runs_contextcite_over_mnemoscope"]
    assert across["n"] == 2 and across["forward_calls"] > 0 and "earlier" in across["caveat"]
    assert across["load1_mean"]["contextcite_earlier_run"] == 2.5
    assert across["seconds_without_contextcite_generation"]["estimate"] > 0
    assert cost["contextcite"]["seconds_mean"]["estimate"] == pytest.approx(60.0)
    assert "earlier run" in cost["contextcite"]["measured"]
    assert res["contextcite"]["n_answer_states_gold"] == 2
    assert res["contextcite"]["top1_accuracy"]["estimate"] == pytest.approx(1.0)
    assert res["paired"]["n"] == res["mnemoscope"]["n_answer_states_gold"]


def test_reuse_contextcite_refuses_items_it_lacks(tmp_path: Path) -> None:
    earlier = _earlier_run(tmp_path)
    with pytest.raises(SystemExit, match="no ContextCite row"):
        bpa.read_reused_contextcite(earlier, [*ITEMS, {**ITEMS[0], "id": "c"}])
    with pytest.raises(SystemExit, match="gold_passage"):
        bpa.read_reused_contextcite(earlier, [{**ITEMS[0], "gold_passage": 2}])
    got, src = bpa.read_reused_contextcite(earlier, ITEMS[:1])
    assert list(got) == ["a"] and src["summary"].endswith("contextcite.json")
    with pytest.raises(SystemExit):  # a reused run cannot also force ContextCite's response
        bpa.parse_args(["--reuse-contextcite", str(earlier), "--cc-response", "forced"])
    assert bpa.parse_args(["--reuse-contextcite", str(earlier)]).mn_response == "contextcite"
    assert bpa.parse_args([]).mn_response == "generate"


def test_summarise_same_run_ratio_only_for_rows_measured_together() -> None:
    rows = [_row(0, 0, 0), _row(1, 0, 0)]
    rows[1]["contextcite"]["reused"] = True
    cost = bpa.summarise(rows, n_resamples=50)["cost"]
    assert cost["ratio_contextcite_over_mnemoscope"]["n"] == 1
    assert cost["ratio_across_runs_contextcite_over_mnemoscope"]["n"] == 1
