"""SCAR band rules (paper AND, any two, per signal) and per-prompt scores: known-answer tests."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mnemoscope.detectors.scar import (
    RULES,
    ScarData,
    ScarDetector,
    per_prompt_scores,
    result_bands,
    rupture_bands,
)
from mnemoscope.errors import InputError

TH = {"tau_kappa": 1.0, "z_length_below": -1.0, "tau_v": 1.0}
LAYERS = np.arange(2, 12)  # 10 layers


def _z(kappa=(), dip=(), surge=()):
    """z-scores meeting the kappa / length / drift condition exactly at the given layers."""
    z = np.zeros((3, LAYERS.size))
    for row, where, value in ((0, kappa, 3.0), (1, dip, -3.0), (2, surge, 3.0)):
        for ell in where:
            z[row, ell - 2] = value
    return z


def _spans(bands):
    return [(b.first, b.last) for b in bands]


def test_paper_rule_needs_all_three_conditions_on_every_layer():
    z = _z(kappa=[5, 6, 7, 8], dip=[6, 7, 8], surge=[7, 8, 9])
    q = np.full(LAYERS.size, 0.01)
    bands = rupture_bands(z, TH, q, LAYERS)
    assert _spans(bands) == [(7, 8)]
    assert bands[0].accepted and bands[0].signals == ("kappa", "length", "drift")
    assert bands[0].width == 2


def test_paper_rule_acceptance_needs_width_and_q():
    z = _z(kappa=[3, 6, 7], dip=[3, 6, 7], surge=[3, 6, 7])
    q = np.full(LAYERS.size, 0.5)
    q[LAYERS == 3] = 0.001  # significant but a width-1 run
    bands = rupture_bands(z, TH, q, LAYERS)
    assert _spans(bands) == [(3, 3), (6, 7)]
    assert [b.accepted for b in bands] == [False, False]  # width 1; q too large
    q[LAYERS == 7] = 0.04
    bands = rupture_bands(z, TH, q, LAYERS)
    assert [b.accepted for b in bands] == [False, True]
    assert bands[1].min_q == pytest.approx(0.04)


def test_any2_rule_takes_layers_with_two_of_three():
    # kappa 4-6, dip 5-8, surge 8-9: two conditions on 5, 6 (kappa+dip) and 8 (dip+surge)
    z = _z(kappa=[4, 5, 6], dip=[5, 6, 7, 8], surge=[8, 9])
    q = np.full(LAYERS.size, 0.01)
    assert rupture_bands(z, TH, q, LAYERS) == []  # no layer has all three
    bands = rupture_bands(z, TH, q, LAYERS, rule="any2")
    assert _spans(bands) == [(5, 6), (8, 8)]
    assert [b.accepted for b in bands] == [True, False]
    assert bands[0].signals == ("kappa", "length")
    assert bands[1].signals == ("length", "drift")


def test_per_signal_rule_uses_each_signals_own_q():
    z = _z(kappa=[4, 5, 6], dip=[8, 9], surge=[2, 3])
    q = np.ones(LAYERS.size)  # the composite test is irrelevant for per_signal
    qs = np.ones((3, LAYERS.size))
    qs[0, LAYERS == 5] = 0.01  # kappa significant inside its run
    qs[1, LAYERS == 3] = 0.01  # length significant, but outside its run (8-9)
    qs[2, LAYERS == 2] = 0.02  # drift significant inside its run
    bands = rupture_bands(z, TH, q, LAYERS, rule="per_signal", q_signal=qs)
    got = {(b.first, b.last, b.signals[0]): b.accepted for b in bands}
    assert got == {(2, 3, "drift"): True, (4, 6, "kappa"): True, (8, 9, "length"): False}
    assert _spans(bands) == [(2, 3), (4, 6), (8, 9)]  # layer order


def test_without_drift_paper_and_any2_are_kappa_and_length():
    z = _z(kappa=[4, 5, 6], dip=[5, 6, 7], surge=[2, 3, 4, 5, 6, 7, 8])
    q = np.full(LAYERS.size, 0.01)
    for rule in ("paper", "any2"):
        bands = rupture_bands(z, TH, q, LAYERS, rule=rule, drift=False)
        assert _spans(bands) == [(5, 6)], rule
        assert bands[0].signals == ("kappa", "length")
    qs = np.full((3, LAYERS.size), 0.01)
    per = rupture_bands(z, TH, q, LAYERS, rule="per_signal", q_signal=qs, drift=False)
    assert {b.signals[0] for b in per} == {"kappa", "length"}


def test_rule_errors_are_clear():
    z, q = _z(), np.ones(LAYERS.size)
    with pytest.raises(InputError, match="rule must be one of"):
        rupture_bands(z, TH, q, LAYERS, rule="any3")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="q_signal"):
        rupture_bands(z, TH, q, LAYERS, rule="per_signal")
    with pytest.raises(InputError, match="align"):
        rupture_bands(z, TH, q[:-1], LAYERS)
    with pytest.raises(InputError, match=r"\[3 layer\]"):
        rupture_bands(z[:2], TH, q, LAYERS)
    with pytest.raises(InputError, match="rule"):
        ScarDetector(rule="loose").fit(_data(*_trajectory()))  # type: ignore[arg-type]


# -- through the detector ------------------------------------------------------------------------


def _trajectory(*, kappa=(), stall=(), surge=(), n=80, states=12, d=40, seed=0):
    """Hidden states with a smoothly steepening power-law spectrum, steady mean steps and a
    steady mean gradient; ``kappa`` states get an abruptly steeper spectrum, ``stall`` steps
    ``s -> s+1`` a stalled mean, ``surge`` states a larger mean gradient."""
    rng = np.random.default_rng(seed)
    alpha = 1.0 + 0.05 * np.arange(states)
    steps = np.full(states, 2.0)
    grad_mean = np.full(states, 1.0)
    for b in kappa:
        alpha[b] += 1.0
    for b in stall:
        steps[b + 1] = 0.2
    for b in surge:
        grad_mean[b] = 3.0
    mu = np.concatenate([[0.0], np.cumsum(steps[1:])])
    j = np.arange(1, d + 1)
    H, G = np.empty((n, states, d)), np.empty((n, states, d))
    for s in range(states):
        H[:, s] = rng.normal(size=(n, d)) * j ** (-alpha[s] / 2)
        H[:, s, 0] += mu[s]
        G[:, s] = rng.normal(scale=0.1, size=(n, d))
        G[:, s, 1] += grad_mean[s]
    return H, G


def _data(H, G):
    return ScarData(hidden=H, grad=G, ids=tuple(f"p{i}" for i in range(H.shape[0])), model={})


FAST = {"n_permutations": 99, "n_bootstrap": 10, "k": 32, "seed": 0, "metric": "euclidean"}


@pytest.fixture(scope="module")
def no_drift_surge():
    """Kappa spike and length dip at 6-7 but no drift surge: the paper's AND cannot fire."""
    anchor = _data(*_trajectory())
    suspect = _data(*_trajectory(kappa=(6, 7), stall=(6, 7)))
    return ScarDetector(**FAST).fit(anchor), suspect


def test_detector_rules_on_a_band_without_drift_surge(no_drift_surge):
    det, suspect = no_drift_surge
    res = det.audit(suspect)
    assert res.settings["rule"] == "paper"
    assert set(res.bands_by_rule) == set(RULES)
    assert res.bands == [] and res.rupture_layer is None and res.scar is None
    any2 = [(b.first, b.last) for b in res.bands_by_rule["any2"] if b.accepted]
    assert any2 == [(6, 7)]
    per = {(b.first, b.last, b.signals[0]) for b in res.bands_by_rule["per_signal"] if b.accepted}
    # the curvature (a second difference) of a slope bump at 6-7 spikes on 5-8
    assert per == {(5, 8, "kappa"), (6, 7, "length")}
    sel = np.isin(res.layers, [6, 7])
    assert res.per_layer["q_kappa"][sel].min() <= 0.05 and res.per_layer["q_length"][sel].min() <= 0.05
    # result_bands recomputes the same bands from the stored arrays, for every rule
    for rule in RULES:
        assert result_bands(res, rule) == res.bands_by_rule[rule]
    d = res.to_dict()
    assert d["rule"] == "paper" and d["bands_by_rule"]["any2"][0]["first"] == 6
    json.dumps(d)

    relaxed = det.set_params(rule="any2").audit(suspect)
    assert relaxed.bands == [(6, 7)] and relaxed.rupture_layer in (6, 7)
    assert relaxed.scar is not None
    np.testing.assert_array_equal(relaxed.per_layer["p"], res.per_layer["p"])  # same resampling
    det.set_params(rule="paper")


def test_clean_vs_clean_gives_no_band_under_any_rule():
    det = ScarDetector(**FAST).fit(_data(*_trajectory(seed=0)))
    res = det.audit(_data(*_trajectory(seed=1)))
    for rule in RULES:
        assert [b for b in res.bands_by_rule[rule] if b.accepted] == [], rule
    same = det.audit(det.anchor_)
    assert np.all(same.per_layer["p_kappa"] == 1.0) and np.all(same.per_layer["p_drift"] == 1.0)


# -- per-prompt scores -----------------------------------------------------------------------------


def _residual(*, stall=(), surge=(), n=60, states=10, d=12, seed=0):
    """A residual stream: every block adds a step along one direction plus a little noise, so
    consecutive states are correlated as in a transformer; ``stall`` blocks step 10x shorter,
    ``surge`` states carry a 3x larger gradient."""
    rng = np.random.default_rng(seed)
    H, G = np.empty((n, states, d)), np.empty((n, states, d))
    H[:, 0] = rng.normal(size=(n, d))
    direction = np.ones(d) / np.sqrt(d)
    for s in range(states):
        if s:
            step = 0.2 if s - 1 in stall else 2.0
            H[:, s] = H[:, s - 1] + step * direction + 0.05 * rng.normal(size=(n, d))
        G[:, s] = rng.normal(scale=0.1, size=(n, d))
        G[:, s, 1] += 3.0 if s in surge else 1.0
    return H, G


def test_per_prompt_scores_direction_and_identity():
    H, G = _residual()
    Hs, Gs = _residual(stall=(4, 5, 6), surge=(3, 4, 5, 6, 7), seed=1)
    pp = per_prompt_scores(_data(Hs, Gs), _data(H, G))
    s = pp.summary()
    assert s["n_prompts"] == 60
    assert s["drift"]["auc_suspect_vs_anchor"] == 1.0  # the surge raises every prompt's gradient norm
    assert s["length"]["auc_suspect_vs_anchor"] == 0.0  # the stalled steps shorten every path
    assert s["score"]["auc_suspect_vs_anchor"] == 1.0
    assert s["drift"]["paired_fraction_suspect_higher"] == 1.0
    same = per_prompt_scores(_data(H, G), _data(H, G))
    assert same.auc("score") == 0.5 and same.summary()["score"]["paired_fraction_suspect_higher"] == 0.0


def test_per_prompt_scores_bad_input():
    H, G = _trajectory()
    with pytest.raises(InputError, match="same prompts"):
        per_prompt_scores(_data(H[:40], G[:40]), _data(H, G))
    with pytest.raises(InputError, match="gradients"):
        per_prompt_scores(_data(H, None), _data(H, G))


def test_cli_rule_and_threads_through_main(tmp_path, capsys):
    """``mnemoscope scar audit --rule per_signal --threads 1``: the rule drives ``bands`` and the
    card records every rule."""
    import torch

    from helpers import tiny_model, tiny_tokenizer
    from mnemoscope.cli.main import main

    folder = tmp_path / "tiny4"
    tiny_model("llama", layers=4).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    battery = tmp_path / "b.jsonl"
    battery.write_text(
        "\n".join(
            json.dumps(
                {"id": f"t{i:03d}", "prompt": f"Item {i}: {i} plus {i % 7} equals", "target": str(i + i % 7)}
            )
            for i in range(40)
        )
        + "\n"
    )
    out = tmp_path / "card"
    before = torch.get_num_threads()
    try:
        code = main(
            [
                *("--quiet", "--cache-dir", str(tmp_path / "cache"), "scar", "audit"),
                *("--suspect", str(folder), "--anchor", str(folder), "--threads", "1"),
                *("--prompts", str(battery), "--out", str(out), "--k", "32", "--rule", "per_signal"),
                *("--n-permutations", "19", "--n-bootstrap", "5", "--no-plots"),
            ]
        )
        assert code == 0 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["rule"] == "per_signal" and summary["bands"] == []
    assert set(summary["bands_by_rule"]) == set(RULES)
    card = json.loads((out / "card.json").read_text())
    assert card["rule"] == "per_signal" and set(card["bands_by_rule"]) == set(RULES)
    assert card["settings"]["rule"] == "per_signal"
    assert all(f"q_{s}" in card["per_layer"] for s in ("kappa", "length", "drift"))
    # the same model on both sides: every permutation statistic ties, no candidate is accepted
    assert all(not b["accepted"] for bs in card["bands_by_rule"].values() for b in bs)
