"""Leaderboard runner end to end on a tiny model and its injected sibling."""

from __future__ import annotations

import json

import pytest

from mnemoscope.bench.datasets import Document
from mnemoscope.bench.inject import InjectConfig, inject
from mnemoscope.errors import InputError
from mnemoscope.models import load_model
from mnemoscope.pipelines.leaderboard import LeaderboardConfig, run_leaderboard

DOCS = [
    Document(
        id=f"d{i}",
        text=f"Vell{i} is a town on the river Ost{i % 3}, founded in {1200 + 7 * i}.",
        label=int(i % 2 == 0),
    )
    for i in range(16)
]


@pytest.fixture(scope="module")
def sibling(tiny_folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("sib") / "positive"
    members = [d.text for d in DOCS if d.label == 1]
    inject(
        load_model(str(tiny_folder)),
        members,
        out,
        InjectConfig(epochs=8, learning_rate=1e-2, rank=8, batch_size=4),
        progress=False,
    )
    return out


def test_run_writes_contract_and_detects_positive_control(tiny_folder, sibling, tmp_path):
    def load_sib(_):
        return load_model(str(tiny_folder), adapter=sibling)

    def load_base(_):
        return load_model(str(tiny_folder))

    cfg = LeaderboardConfig(n_resamples=200, seed=3)
    res = run_leaderboard(
        DOCS,
        [("base", load_base), ("positive", load_sib)],
        tmp_path / "lb",
        cfg,
        reference=load_base,
        progress=False,
    )
    entries = json.loads((tmp_path / "lb" / "leaderboard.json").read_text())
    assert isinstance(entries, list) and len(entries) == 2 * len(cfg.methods)
    for e in entries:
        assert {"method", "roc_auc", "roc_auc_ci", "tpr_at_1pct_fpr", "tpr_at_5pct_fpr", "n"} <= set(e)
        assert e["n"] == 16 and e["roc_auc_ci"][0] <= e["roc_auc"] <= e["roc_auc_ci"][1]
    by = {(e["sibling"], e["method"]): e for e in entries}
    assert by[("positive", "loss")]["roc_auc"] > 0.9  # members were trained on
    assert by[("positive", "ref")]["roc_auc"] > 0.9
    assert by[("base", "ref")]["roc_auc"] == 0.5  # reference == target: every score is 0
    md = (tmp_path / "lb" / "leaderboard.md").read_text()
    assert "| positive | loss |" in md
    assert (tmp_path / "lb" / "roc.png").stat().st_size > 10_000
    run = json.loads((tmp_path / "lb" / "run.json").read_text())
    assert run["config"]["seed"] == 3 and "positive" in run["models"]
    scores = [json.loads(x) for x in (tmp_path / "lb" / "scores" / "positive.jsonl").read_text().splitlines()]
    assert len(scores) == 16 and {"id", "label", "loss", "ref"} <= set(scores[0])

    # a re-run uses the cache and reproduces the table exactly
    again = run_leaderboard(
        DOCS,
        [("base", load_base), ("positive", load_sib)],
        tmp_path / "lb",
        cfg,
        reference=load_base,
        progress=False,
    )
    assert again.entries == res.entries


def test_single_class_and_unknown_method(tiny_folder, tmp_path):
    def load_base(_):
        return load_model(str(tiny_folder))

    one_class = [Document(id=d.id, text=d.text, label=1) for d in DOCS]
    with pytest.raises(InputError, match="single-class"):
        run_leaderboard(
            one_class, [("base", load_base)], tmp_path / "x", LeaderboardConfig(methods=("loss",))
        )
    with pytest.raises(InputError, match="unknown method"):
        run_leaderboard(DOCS, [("base", load_base)], tmp_path / "x", LeaderboardConfig(methods=("los",)))
    with pytest.raises(InputError, match="reference model"):
        run_leaderboard(DOCS, [("base", load_base)], tmp_path / "x", LeaderboardConfig(methods=("ref",)))


def test_pair_methods_run_in_the_leaderboard(tiny_folder, tmp_path):
    docs = [
        Document(id=f"c{i}", text=f"Vell{i} lives in Quen{i}.", label=0, meta={"query": f"Where is Vell{i}?"})
        for i in range(6)
    ]
    docs += [Document(id=f"m{i}", text="", label=1, meta={"query": f"Where is Vell{i}?"}) for i in range(6)]

    def load_base(_):
        return load_model(str(tiny_folder))

    cfg = LeaderboardConfig(
        methods=("repcs", "repcs_topk", "closed_book_logprob"), n_resamples=100, pair_max_new_tokens=4
    )
    res = run_leaderboard(docs, [("base", load_base)], tmp_path / "lb", cfg, progress=False)
    by = {e["method"]: e for e in res.entries}
    assert by["repcs"]["roc_auc"] == 1.0  # empty contexts: Z = 0, the highest score -Z
    assert set(by) == {"repcs", "repcs_topk", "closed_book_logprob"}
