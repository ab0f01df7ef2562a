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
    blind = ("blind_tfidf", "blind_date", "blind_embedding")
    assert isinstance(entries, list) and len(entries) == 2 * (len(cfg.methods) + len(blind))
    for e in entries:
        assert {"method", "roc_auc", "roc_auc_ci", "tpr_at_1pct_fpr", "tpr_at_5pct_fpr", "n"} <= set(e)
        assert e["n"] == 16 and e["roc_auc_ci"][0] <= e["roc_auc"] <= e["roc_auc_ci"][1]
    by = {(e["sibling"], e["method"]): e for e in entries}
    for sib in ("base", "positive"):
        for m in blind:
            assert by[(sib, m)]["blind"] is True and by[(sib, m)]["protocol"].startswith("5-fold CV")
        # the blind numbers do not depend on the model: identical rows on both siblings
        assert by[("base", "blind_tfidf")]["roc_auc"] == by[("positive", "blind_tfidf")]["roc_auc"]
        best = max((by[(sib, m)] for m in blind), key=lambda e: e["roc_auc"])
        assert by[(sib, "loss")]["blind_roc_auc"] == best["roc_auc"]
        assert by[(sib, "loss")]["blind_method"] == best["method"]
    assert by[("positive", "loss")]["roc_auc"] > 0.9  # members were trained on
    assert by[("positive", "ref")]["roc_auc"] > 0.9
    assert by[("base", "ref")]["roc_auc"] == 0.5  # reference == target: every score is 0
    md = (tmp_path / "lb" / "leaderboard.md").read_text()
    run = json.loads((tmp_path / "lb" / "run.json").read_text())
    name = run["models"]["base"]["name"]
    assert by[("base", "loss")]["model"] == name != "base"  # the model's name, not the sibling label
    assert f"| {name} + positive | loss |" in md and f"| {name} | blind_tfidf (text only) |" in md
    assert "best blind AUC (text only)" in md
    assert (tmp_path / "lb" / "roc.png").stat().st_size > 10_000
    assert run["config"]["seed"] == 3 and "positive" in run["models"]
    assert isinstance(run["shift_warning"], bool) and run["shift_reason"]
    assert set(run["shift"]) == {"base", "positive"}
    assert run["truncation"]["n_truncated"] == 0
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
    assert {"repcs", "repcs_topk", "closed_book_logprob"} <= set(by)


def test_shift_warning_fires_on_shifted_text_and_truncation_is_said_before_the_run(tiny_folder, tmp_path):
    """Members and non-members differ only in surface (era of the dates, register): the blind
    baselines separate them without the model, and run.json says the model's AUCs on this data
    do not measure membership. A long document is announced once, before any forward pass."""
    topics = ["mill", "bridge", "harbour", "orchard", "tower", "market"]
    docs = []
    for i in range(24):
        t = topics[i % len(topics)]
        if i % 2:
            text = f"Anno {1880 + i}, the {t} was restored whereupon the elders did so decree."
        else:
            text = f"In {2031 + i} the {t} got an upgrade and the council posted it online."
        docs.append(Document(id=f"s{i}", text=text, label=i % 2))
    docs[0] = Document(id="s0", text=docs[0].text + " More words follow here." * 30, label=0)

    def load_base(_):
        return load_model(str(tiny_folder))

    said: list[tuple[str, bool]] = []
    out = tmp_path / "lb"

    def notify(msg: str) -> None:
        said.append((msg, any((out / "cache").glob("*.npz"))))

    cfg = LeaderboardConfig(methods=("loss",), n_resamples=200, max_tokens=300, blind_embedding=False)
    res = run_leaderboard(docs, [("base", load_base)], out, cfg, progress=False, notify=notify)
    assert len(said) == 1 and not said[0][1]  # once, before any token statistics were computed
    assert said[0][0].startswith("1 of 24 documents will be truncated to 300 tokens")
    run = json.loads((out / "run.json").read_text())
    assert run["shift_warning"] is True and "predictable from the text alone" in run["shift_reason"]
    assert run["truncation"]["n_truncated"] == 1 and run["truncation"]["longest_tokens"] > 300
    assert res.shift["shift_warning"] is True
    assert {e["method"] for e in res.entries} == {"loss", "blind_tfidf", "blind_date"}

    # --no-blind: no blind rows, and the diagnostic says it was not measured
    cfg = LeaderboardConfig(methods=("loss",), n_resamples=50, max_tokens=300, blind=False)
    res = run_leaderboard(docs, [("base", load_base)], tmp_path / "nb", cfg, progress=False, notify=notify)
    assert [e["method"] for e in res.entries] == ["loss"]
    assert res.shift["shift_warning"] is False and res.shift["shift_reason"].startswith("not measured")


def _shifted_rows(n: int = 24) -> list[tuple[str, int]]:
    topics = ["mill", "bridge", "harbour", "orchard", "tower", "market"]
    rows = []
    for i in range(n):
        t = topics[i % len(topics)]
        if i % 2:
            rows.append((f"Anno {1880 + i}, the {t} was restored whereupon the elders did so decree.", 1))
        else:
            rows.append((f"In {2031 + i} the {t} got an upgrade and the council posted it online.", 0))
    return rows


def _write(fmt: str, rows: list[tuple[str, int]], folder) -> str:
    import csv

    if fmt == "jsonl":
        path = folder / "d.jsonl"
        path.write_text(
            "".join(
                json.dumps({"id": f"x{i}", "text": t, "label": y}) + "\n" for i, (t, y) in enumerate(rows)
            )
        )
    elif fmt == "wikimia":
        path = folder / "w.jsonl"
        path.write_text("".join(json.dumps({"input": t, "label": y}) + "\n" for t, y in rows))
    elif fmt == "bookmia":
        path = folder / "b.csv"
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["book_id", "book", "snippet", "label"])
            w.writerows([i // 4, f"Book {i // 4}", t, y] for i, (t, y) in enumerate(rows))
    else:
        path = folder / "mimir"
        path.mkdir()
        (path / "member.txt").write_text("".join(t + "\n" for t, y in rows if y))
        (path / "nonmember.txt").write_text("".join(t + "\n" for t, y in rows if not y))
    return str(path)


@pytest.mark.parametrize("fmt", ["jsonl", "wikimia", "bookmia", "mimir"])
def test_bench_run_cli_prints_blind_baselines_and_the_shift_warning(fmt, tiny_folder, tmp_path, capsys):
    from mnemoscope.cli.main import main

    data = _write(fmt, _shifted_rows(), tmp_path)
    out = tmp_path / "lb"
    argv = ["--quiet", "bench", "run", "--model", str(tiny_folder), "--data", data, "--out", str(out)]
    argv += ["--methods", "loss,zlib", "--n-resamples", "100", "--no-blind-embedding", "--threads", "1"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    # each likelihood attack is printed next to the best blind baseline, and the blind rows too
    assert "best blind AUC (text only)" in printed
    assert "| blind_tfidf (text only) |" in printed and "| blind_date (text only) |" in printed
    assert "WARNING: distribution shift: labels are predictable from the text alone" in printed
    run = json.loads((out / "run.json").read_text())
    assert run["shift_warning"] is True and run["threads"] == 1
    ids = [json.loads(x)["id"] for x in (out / "scores" / "base.jsonl").read_text().splitlines()]
    prefix = {"jsonl": "x", "wikimia": "wikimia-", "bookmia": "bookmia-", "mimir": "member-"}[fmt]
    assert any(i.startswith(prefix) for i in ids)


def test_bench_run_cli_says_truncation_once_before_the_table(tiny_folder, tmp_path, capsys):
    from mnemoscope.cli.main import main

    rows = [(t + " and so on" * 40 if i < 3 else t, y) for i, (t, y) in enumerate(_shifted_rows())]
    data = _write("wikimia", rows, tmp_path)
    argv = [
        "--quiet",
        "bench",
        "run",
        "--model",
        str(tiny_folder),
        "--data",
        data,
        "--out",
        str(tmp_path / "o"),
    ]
    argv += ["--methods", "loss", "--n-resamples", "50", "--no-blind", "--max-tokens", "200"]
    assert main(argv) == 0
    cap = capsys.readouterr()
    lines = [x for x in cap.err.splitlines() if "will be truncated" in x]
    assert lines == [
        "mnemoscope: warning: 3 of 24 documents will be truncated to 200 tokens (the longest has "
        + lines[0].split("the longest has ")[1]
    ]
    assert "use --max-tokens or --long-policy reject" in lines[0]
    assert "3 of 24 documents were truncated to 200 tokens" in cap.out
    assert "shift diagnostic: not measured" in cap.out
