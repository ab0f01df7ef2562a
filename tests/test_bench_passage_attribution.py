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
