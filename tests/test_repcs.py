"""RePCS: KL estimators, calibration guarantees, CLI contract."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from mnemoscope.cli.main import main
from mnemoscope.detectors.repcs import (
    RePCS,
    dkw_epsilon,
    kl_from_logprobs,
    paper_sample_size,
    quantile_threshold,
    topk_kl,
    topk_kl_from_trace,
)
from mnemoscope.errors import InputError
from mnemoscope.trace import PairConfig, PairItem, Tracer, trace_pairs


@pytest.fixture(scope="module")
def traces(lm):
    items = [
        PairItem("a", "Quenmar lies on the Zorblat river.", "Which river?"),
        PairItem("b", "", "Which river?"),
        PairItem("c", "Vell is an invented fox of the northern hills.", "Who is Vell?"),
    ]
    return trace_pairs(Tracer(lm), items, PairConfig(max_new_tokens=5, top_k=20))


def _logsoftmax(x):
    return x - np.logaddexp.reduce(x, axis=-1, keepdims=True)


def test_kl_from_full_logprobs_matches_hand_value():
    p = np.log(np.array([[0.5, 0.25, 0.25]]))
    q = np.log(np.array([[0.25, 0.5, 0.25]]))
    kl = kl_from_logprobs(p, q)
    assert kl.forward[0] == pytest.approx(0.5 * math.log(2) + 0.25 * math.log(0.5))
    assert kl_from_logprobs(p, p).forward[0] == 0.0
    # unnormalised log-scores are renormalised
    assert kl_from_logprobs(p + 3.0, q - 1.0).forward[0] == pytest.approx(kl.forward[0])
    with pytest.raises(InputError, match=r"step 0"):
        kl_from_logprobs(np.array([[np.nan, 0.0, 0.0]]), q)
    with pytest.raises(InputError, match=r"\[step vocab\]"):
        kl_from_logprobs(p, q[:, :2])


def test_topk_estimator_is_exact_with_the_whole_vocabulary_and_a_lower_bound_with_exact_values():
    rng = np.random.default_rng(0)
    a, b = _logsoftmax(rng.normal(size=30)), _logsoftmax(rng.normal(size=30))
    full = kl_from_logprobs(a[None], b[None]).forward[0]
    est_all, _ = topk_kl(dict(enumerate(a)), dict(enumerate(b)))
    assert est_all == pytest.approx(full, rel=1e-6)
    # both paths' values known on the union (no imputation): coarse-graining lowers KL
    top = np.argsort(-a)[:5]
    exact = {int(i): float(a[i]) for i in top}, {int(i): float(b[i]) for i in top}
    assert topk_kl(*exact)[0] <= full + 1e-12
    assert topk_kl({1: -0.1}, {1: -0.1}) == (0.0, 0.0)
    with pytest.raises(InputError, match="sum to"):
        topk_kl({1: 0.0, 2: 0.0}, {1: -1.0})
    with pytest.raises(InputError, match="non-finite"):
        topk_kl({1: float("nan")}, {1: -1.0})


def test_topk_estimator_tracks_full_kl_on_traces(traces):
    for t in traces:
        est = topk_kl_from_trace(t).forward
        assert est.shape == t.kl_steps.shape
        if t.identical_prompts:
            assert np.all(est < 1e-9)


def test_z_orientation_and_empty_context(traces):
    det = RePCS()
    z = det.z(traces)
    assert z[1] == pytest.approx(0.0, abs=1e-6) and traces[1].identical_prompts
    assert z[0] == pytest.approx(traces[0].kl_steps.sum())
    assert RePCS(aggregate="mean").z(traces)[0] == pytest.approx(traces[0].kl_steps.mean())
    assert RePCS(direction="reverse").z(traces)[0] == pytest.approx(traces[0].kl_rev_steps.sum())
    assert RePCS(max_steps=2).z(traces)[0] == pytest.approx(traces[0].kl_steps[:2].sum())


def test_conformal_quantile_and_guarantees():
    z = np.arange(1, 100, dtype=float)  # n = 99
    assert quantile_threshold(z, 0.05) == 5.0  # k = floor(0.05 * 100) = 5
    assert quantile_threshold(z[:10], 0.05) == float("-inf")  # too few to guarantee 5 %
    assert quantile_threshold(z, 0.05, "paper") == pytest.approx(np.quantile(z, 0.05))
    # empirical check of P(Z_new < tau) <= alpha over many random calibrations
    rng = np.random.default_rng(1)
    hits = [rng.normal() < quantile_threshold(rng.normal(size=59), 0.1) for _ in range(4000)]
    assert np.mean(hits) <= 0.1 + 0.015
    assert dkw_epsilon(500, 0.05) == pytest.approx(math.sqrt(math.log(40) / 1000))
    assert paper_sample_size(1.0, 32, 2.0, 0.05) == pytest.approx(8 * 32 * math.log(40) / 4)


def test_fit_records_bound_and_flags():
    det = RePCS(alpha=0.1).fit_scores(np.linspace(2, 12, 49), memorized=np.array([0.1, 0.3]), gamma=1.5, T=8)
    b = det.bound_
    assert det.tau_ == pytest.approx(2 + 4 * 10 / 48) and b.n == 49
    assert b.delta_gap == pytest.approx(7 - 0.2) and b.paper_required_n == pytest.approx(
        paper_sample_size(1.5, 8, 6.8, 0.05)
    )
    assert b.fpr_upper_bound == pytest.approx(b.empirical_fpr + dkw_epsilon(49, 0.05))
    assert det.flag(np.array([0.0, 100.0])).tolist() == [True, False]
    rec = det.calibration_record(model={"name": "x"})
    assert rec["tau"] == det.tau_ and rec["bound"]["n"] == 49 and rec["model"] == {"name": "x"}
    with pytest.raises(InputError):
        RePCS().fit_scores(np.array([1.0, np.nan]))
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        RePCS().flag(np.array([1.0]))


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_cli_calibrate_score_eval(tiny_folder, tmp_path, capsys):
    rows = [
        {
            "id": f"c{i}",
            "context": f"Vell{i} lives in Quen{i}.",
            "query": f"Where does Vell{i} live?",
            "label": 0,
        }
        for i in range(12)
    ]
    rows += [
        {"id": f"m{i}", "context": "", "query": f"Where does Vell{i} live?", "label": 1, "kind": "memorized"}
        for i in range(6)
    ]
    data = tmp_path / "rel.jsonl"
    _write(data, rows)
    common = ["--quiet", "--cache-dir", str(tmp_path / "cache")]
    model = ["--model", str(tiny_folder), "-T", "4"]
    assert (
        main(
            [
                *common,
                "repcs",
                "calibrate",
                *model,
                "--input",
                str(data),
                "--out",
                str(tmp_path / "cal.json"),
                "--alpha",
                "0.2",
            ]
        )
        == 0
    )
    cal = json.loads((tmp_path / "cal.json").read_text())
    assert (
        cal["n"] == 12 and cal["alpha"] == 0.2 and cal["T"] == 4 and len(cal["calibration_data_sha256"]) == 64
    )
    assert cal["bound"]["delta_gap"] > 0 and cal["bound"]["paper_required_n"] > 0

    scores = tmp_path / "scores.jsonl"
    argv = [
        *common,
        "repcs",
        "score",
        "--model",
        str(tiny_folder),
        "--calibration",
        str(tmp_path / "cal.json"),
        "--input",
        str(data),
        "--out",
        str(scores),
    ]
    assert main(argv) == 0
    out = [json.loads(x) for x in scores.read_text().splitlines()]
    assert len(out) == 18 and all(r["score"] == -r["kl"] for r in out)
    # an empty context is no evidence: never flagged, on every path (the server's rule too)
    assert all(
        not r["memorized"] and r["identical_prompts"] and "never flagged" in r["note"]
        for r in out
        if r["id"].startswith("m")
    )
    assert main(argv) == 0 and len(scores.read_text().splitlines()) == 18  # resumed: nothing added
    capsys.readouterr()

    assert (
        main(
            [
                *common,
                "repcs",
                "eval",
                *model,
                "--input",
                str(data),
                "--out",
                str(tmp_path / "ev"),
                "--n-resamples",
                "100",
            ]
        )
        == 0
    )
    rep = json.loads((tmp_path / "ev" / "report.json").read_text())
    for key in ("roc_auc", "roc_auc_ci", "fpr_at_95_tpr", "precision_at_10", "n"):
        assert key in rep
    assert rep["n"] == 18 and rep["roc_auc"] == 1.0  # empty contexts give Z = 0 < every clean Z
    assert rep["held_out"]["n"] == 18 - rep["threshold"]["n_calibration"]
    assert rep["empty_context_records"] == 6 and "memorized vs clean" in rep["by_kind"]
    assert [r["sigma"] for r in rep["noise_robustness"]] == [0.0, 0.02, 0.05, 0.1]
    sc = [json.loads(x) for x in (tmp_path / "ev" / "scores.jsonl").read_text().splitlines()]
    assert {"id", "score", "label"} <= set(sc[0]) and len(sc) == 18

    # a calibration made on another model is refused
    cal["model"]["fingerprint"] = "0" * 64
    (tmp_path / "other.json").write_text(json.dumps(cal))
    assert (
        main(
            [
                *common,
                "repcs",
                "score",
                "--model",
                str(tiny_folder),
                "--calibration",
                str(tmp_path / "other.json"),
                "--input",
                str(data),
                "--out",
                str(tmp_path / "x.jsonl"),
            ]
        )
        == 1
    )
    assert "was fitted on" in capsys.readouterr().err
