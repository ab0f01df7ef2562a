"""SCAR: known-answer tests of the signals, the detector, gradient capture and the audit pipeline."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy.stats import false_discovery_control

from mnemoscope.detectors.scar import (
    ScarData,
    ScarDetector,
    calibrate_weights,
    contiguous_runs,
    resolve_k,
)
from mnemoscope.errors import InputError, MnemoscopeError
from mnemoscope.features import spectral as sp
from mnemoscope.stats import bh_adjust
from mnemoscope.trace.gradients import encode_pair, gradient_batch

# -- synthetic trajectories -------------------------------------------------------------------------


def _trajectory(
    *, n: int = 80, states: int = 12, d: int = 40, bump: tuple[int, ...] = (), seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Hidden states with a smoothly steepening power-law spectrum and a steady mean drift;
    at the ``bump`` states the spectrum steepens abruptly, the mean stalls and the gradient surges."""
    rng = np.random.default_rng(seed)
    alpha = 1.0 + 0.05 * np.arange(states)
    steps = np.full(states, 2.0)
    grad_mean = np.full(states, 1.0)
    for b in bump:
        alpha[b] += 1.0
        steps[b + 1] = 0.2  # mu stalls on the steps b -> b+1
        grad_mean[b] = 3.0
    mu = np.concatenate([[0.0], np.cumsum(steps[1:])])
    H = np.empty((n, states, d))
    G = np.empty((n, states, d))
    j = np.arange(1, d + 1)
    for s in range(states):
        H[:, s] = rng.normal(size=(n, d)) * j ** (-alpha[s] / 2)
        H[:, s, 0] += mu[s]
        G[:, s] = rng.normal(scale=0.1, size=(n, d))
        G[:, s, 1] += grad_mean[s]
    return H, G


def _data(H: np.ndarray, G: np.ndarray | None, arch: str = "llama") -> ScarData:
    return ScarData(
        hidden=H, grad=G, ids=tuple(f"p{i}" for i in range(H.shape[0])), model={"architecture": arch}
    )


FAST = {"n_permutations": 99, "n_bootstrap": 20, "k": 32, "seed": 0}

# -- features ------------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.7, 1.0, 2.0])
def test_power_law_spectrum_gives_its_exponent(alpha):
    n, d, k = 100, 80, 32
    rng = np.random.default_rng(1)
    # rows with an exact prescribed covariance spectrum: orthonormal, centred left vectors
    U, _ = np.linalg.qr(rng.normal(size=(n, d)) - 0.0)
    U = U - U.mean(axis=0)
    U, _ = np.linalg.qr(U)
    V, _ = np.linalg.qr(rng.normal(size=(d, d)))
    lam = np.arange(1, d + 1, dtype=float) ** -alpha
    X = U @ np.diag(np.sqrt(lam * (n - 1))) @ V.T
    eig = sp.spectra(X[:, None, :].repeat(3, axis=1), k)[0]
    np.testing.assert_allclose(eig, lam[:k], rtol=1e-6)
    assert sp.spectral_slope(eig) == pytest.approx(alpha, abs=1e-6)
    drop = sp.spectral_slope(eig, "drop")
    assert drop == pytest.approx((lam[0] - lam[k - 1]) / lam[:k].sum())


def test_curvature_robust_z_and_savgol():
    assert sp.curvature([1.0, 2.0, 3.0, 4.0]).tolist() == [0.0, 0.0]
    z = sp.robust_z(np.array([0.0, 1.0, 2.0, 3.0, 4.0]))
    assert z.tolist() == [-2.0, -1.0, 0.0, 1.0, 2.0]
    assert sp.robust_z(np.ones(5)).tolist() == [0.0] * 5
    sm = sp.savgol([0.0, 0.0, 3.0, 0.0, 0.0])
    assert sm[1:4].tolist() == pytest.approx([1.0, 1.0, 1.0])


def test_ledoit_wolf_and_whitened_length_match_sklearn():
    from sklearn.covariance import ledoit_wolf, ledoit_wolf_shrinkage

    rng = np.random.default_rng(0)
    H = rng.normal(size=(30, 4, 50)) * np.linspace(0.5, 3, 50)
    Kc = sp._centred(sp.gram_matrices(H))
    ours = sp.ledoit_wolf_shrinkage(Kc, 50)
    ref = [ledoit_wolf_shrinkage(H[:, s] - H[:, s].mean(0), assume_centered=True) for s in range(4)]
    np.testing.assert_allclose(ours, ref, rtol=1e-10)
    L = sp.thermodynamic_length(H)
    mu = np.median(H, axis=0)
    for s in range(3):
        cov, _ = ledoit_wolf(H[:, s])
        d = mu[s + 1] - mu[s]
        assert L[s] == pytest.approx(np.sqrt(d @ np.linalg.solve(cov, d)), rel=1e-8)


def test_cka_distance_zero_for_identical_layers_and_subsets_use_gram():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 1, 8))
    H = np.concatenate([X, X * 3.0, rng.normal(size=(20, 1, 8))], axis=1)
    dist = sp.thermodynamic_length(H, metric="cka")
    assert dist[0] == pytest.approx(0.0, abs=1e-12)
    assert dist[1] > 0.3
    rows = np.array([0, 3, 5, 7, 9, 11, 13, 15])
    full = sp.layer_signals(H, k=4, rows=rows, gram=sp.gram_matrices(H))
    sub = sp.layer_signals(H[rows], k=4)
    np.testing.assert_allclose(full.slope, sub.slope)
    np.testing.assert_allclose(full.length, sub.length)


def test_too_few_prompts_for_k():
    H = np.random.default_rng(0).normal(size=(20, 4, 30))
    with pytest.raises(InputError, match="k=32"):
        sp.layer_signals(H, k=32)
    with pytest.raises(InputError, match="too few prompts"):
        resolve_k(64, 40, 576)
    with pytest.raises(InputError, match="too few prompts"):
        resolve_k("auto", 20, 576)
    assert resolve_k("auto", 65, 576) == 64


def test_contiguous_runs_and_bh_matches_scipy():
    assert contiguous_runs([True, True, False, True], [3, 4, 5, 6]) == [(3, 4), (6, 6)]
    p = np.random.default_rng(3).uniform(size=29) ** 2
    np.testing.assert_allclose(bh_adjust(p), false_discovery_control(p, method="bh"))


def test_bh_agrees_with_statsmodels():
    # the issue names statsmodels' BH; ours (scipy) must give the same q-values, ties included
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    rng = np.random.default_rng(4)
    for n in (1, 2, 28, 200):
        p = rng.uniform(size=n) ** 2
        p[: n // 3] = p[0]
        np.testing.assert_allclose(bh_adjust(p), multitest.multipletests(p, method="fdr_bh")[1], atol=1e-12)


# -- detector ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def banded():
    """A synthetic audit with a band at layers 6-7 (see the next test)."""
    # Euclidean length: under the whitened metric the abrupt change of covariance at the bump
    # itself lengthens the step 7 -> 8 (the metric changes), so only layer 6 dips there.
    H, G = _trajectory()
    Hs, Gs = _trajectory(bump=(6, 7))
    det = ScarDetector(**FAST, metric="euclidean").fit(_data(H, G))
    return det.audit(_data(Hs, Gs))


def test_injected_bump_gives_a_band_at_the_right_layers(banded):
    res = banded
    assert res.bands == [(6, 7)]
    assert list(res.layers) == list(range(2, 11))
    assert res.rupture_layer in (6, 7)
    assert res.scar is not None and res.scar.estimate is not None
    assert res.scar.ci_low <= res.scar.estimate <= res.scar.ci_high
    sel = np.isin(res.layers, [6, 7])
    assert res.per_layer["q"][sel].min() <= 0.05
    d = res.to_dict()
    assert d["bands"] == [[6, 7]] and d["rupture_layer"] == res.rupture_layer
    json.dumps(d)  # serialisable


def test_identical_suspect_and_anchor_give_no_band():
    H, G = _trajectory(bump=(6, 7))
    det = ScarDetector(**FAST).fit(_data(H, G))
    res = det.audit(_data(H.copy(), G.copy()))
    assert res.bands == []
    assert res.rupture_layer is None and res.scar is None
    assert np.all(res.per_layer["p"] == 1.0)  # swapping identical rows changes nothing


def test_two_clean_draws_give_no_band_and_results_are_deterministic():
    H, G = _trajectory(seed=0)
    Hs, Gs = _trajectory(seed=1)
    det = ScarDetector(**FAST).fit(_data(H, G))
    r1 = det.audit(_data(Hs, Gs))
    r2 = det.audit(_data(Hs, Gs))
    assert r1.bands == []
    np.testing.assert_array_equal(r1.per_layer["p"], r2.per_layer["p"])
    assert r1.peak.ci_low == r2.peak.ci_low


def test_anchor_delta_mode_smoothing_and_no_drift():
    H, G = _trajectory()
    Hs, Gs = _trajectory(bump=(6, 7))
    res = (
        ScarDetector(**FAST, reference="anchor_delta", metric="euclidean")
        .fit(_data(H, G))
        .audit(_data(Hs, Gs))
    )
    assert 6 in res.band_layers() or 7 in res.band_layers()
    res2 = (
        ScarDetector(**FAST, drift=False, smooth=True, metric="cka")
        .fit(_data(H, None))
        .audit(_data(Hs, None))
    )
    assert res2.per_layer["z_drift"].tolist() == [0.0] * len(res2.layers)


def test_bad_pairs_raise_clear_errors():
    H, G = _trajectory()
    det = ScarDetector(**FAST).fit(_data(H, G))
    with pytest.raises(MnemoscopeError, match="layers"):
        det.audit(_data(H[:, :-1], G[:, :-1]))
    with pytest.raises(MnemoscopeError, match="architecture"):
        det.audit(_data(H, G, arch="gpt2"))
    with pytest.raises(InputError, match="gradients"):
        det.audit(_data(H, None))
    with pytest.raises(InputError, match="target"):
        ScarDetector(**FAST).fit(_data(H, None))
    other = ScarData(hidden=H, grad=G, ids=tuple(f"q{i}" for i in range(H.shape[0])), model={})
    with pytest.raises(InputError, match="same prompts"):
        det.audit(other)
    with pytest.raises(InputError, match="metric"):
        ScarDetector(metric="fisher").fit(_data(H, G))  # type: ignore[arg-type]
    with pytest.raises(InputError, match="k=64"):
        ScarDetector(k=64).fit(_data(H, G))


def test_sklearn_contract():
    from sklearn.base import clone
    from sklearn.exceptions import NotFittedError

    det = ScarDetector(k=32, smooth=True)
    assert clone(det).get_params() == det.get_params()
    with pytest.raises(NotFittedError):
        det.audit(_data(*_trajectory()))
    H, G = _trajectory()
    assert det.fit(_data(H, G)) is det


def test_calibrate_weights_prefers_the_informative_signal():
    rng = np.random.default_rng(0)
    clean = [rng.normal(size=(3, 20)) for _ in range(4)]
    dirty = [rng.normal(size=(3, 20)) + np.array([[0.0], [-2.0], [0.0]]) for _ in range(4)]
    w = calibrate_weights(clean + dirty, [0] * 4 + [1] * 4)
    assert w[1] > abs(w[0]) and w[1] > abs(w[2])
    assert sum(abs(x) for x in w) == pytest.approx(3.0)
    with pytest.raises(InputError):
        calibrate_weights(clean, [0] * 4)


# -- gradient capture ------------------------------------------------------------------------------


def test_gradients_match_autograd_in_float64():
    from helpers import tiny_lm

    lm = tiny_lm("llama", seed=3)
    lm.model.double()
    pairs = [encode_pair(lm.tokenizer, "hello there", "world"), encode_pair(lm.tokenizer, "ab", "cde fg")]
    g = gradient_batch(lm, pairs)
    assert g.grad.shape == (2, 4, 64) and g.hidden.shape == (2, 4, 64)
    for i, (p, t) in enumerate(pairs):
        ids = torch.tensor([p + t])
        emb = lm.model.get_input_embeddings()(ids).detach().requires_grad_(True)
        out = lm.model(inputs_embeds=emb, output_hidden_states=True)
        lp = out.logits[0, len(p) - 1 : -1].log_softmax(-1).gather(-1, torch.tensor(t)[:, None]).sum()
        grads = torch.autograd.grad(lp, out.hidden_states[:-1])  # block inputs = states 0..N-1
        ref = torch.stack([x[0, len(p) - 1] for x in grads]).numpy()
        np.testing.assert_allclose(g.grad[i, :-1], ref, atol=1e-12)
        assert g.logp[i] == pytest.approx(float(lp.detach()), abs=1e-10)
    assert all(not p.requires_grad or p.grad is None for p in lm.model.parameters())
    assert all(p.requires_grad for p in lm.model.parameters())  # restored afterwards
    gm = gradient_batch(lm, pairs, position="mean")
    assert gm.grad.shape == g.grad.shape
    lm.model.float()


def test_gradient_capture_removes_hooks_on_error(lm):
    with pytest.raises(InputError, match="target"):
        gradient_batch(lm, [([5, 6], [])])
    blocks = lm.model.model.layers
    assert all(len(b._forward_hooks) == 0 and len(b._forward_pre_hooks) == 0 for b in blocks)


# -- pipeline on the tiny model ------------------------------------------------------------------------


def _battery(path, n=40, targets=True):
    rows = []
    for i in range(n):
        rec = {"id": f"t{i:03d}", "prompt": f"Item {i}: {i} plus {i % 7} equals", "category": "math"}
        if targets:
            rec["target"] = str(i + i % 7)
        rows.append(rec)
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_audit_pipeline_card_and_resume(tmp_path):
    from helpers import tiny_lm
    from mnemoscope.pipelines.scar import AuditConfig, extract_signals, read_battery, run_audit

    battery = _battery(tmp_path / "b.jsonl")
    lm = tiny_lm("llama", layers=4)
    suspect = tiny_lm("llama", seed=1, layers=4)
    cfg = AuditConfig(k=32, n_permutations=49, n_bootstrap=10, chunk_size=16, batch_size=8, progress=False)
    out = tmp_path / "card"
    res = run_audit(suspect, lm, battery, out, config=cfg, plots=False)
    card = json.loads((out / "card.json").read_text())
    for key in (
        "bands",
        "rupture_layer",
        "scar_score",
        "scar_score_ci",
        "scar_area",
        "per_layer",
        "settings",
    ):
        assert key in card
    assert set(card["per_layer"]) >= {"kappa", "length", "drift", "z_kappa", "T", "p", "q"}
    assert set(card["per_layer"]) >= {"z_length", "z_drift", "L"}
    assert card["per_layer"]["L"] == card["per_layer"]["length"]  # the contract's name for length
    assert all(len(v) == len(card["layers"]) for v in card["per_layer"].values())
    assert card["settings"]["n_prompts"] == 40
    assert card["settings"]["seed"] == 0 and card["settings"]["precision"] is not None
    assert card["settings"]["prompt_tokens"]["max"] >= card["settings"]["prompt_tokens"]["min"] > 0
    assert (out / "per_layer.csv").is_file() and (out / "card.html").is_file()
    assert res.settings["k_used"] == 32
    # resumable: chunks exist and a re-run reuses them
    chunks = sorted((out / "signals" / "suspect").glob("chunk-*.npz"))
    assert len(chunks) == 3
    records = read_battery(battery)
    again = extract_signals(
        lambda: pytest.fail("complete signals must not load the model"),
        records,
        out / "signals" / "suspect",
        config=cfg,
    )
    assert again.hidden.shape == (40, 5, 64)
    # an interrupted run (a chunk missing) recomputes only that chunk, with the same values
    full = {p.name: p.stat().st_mtime_ns for p in chunks}
    chunks[1].unlink()
    loads = []
    resumed = extract_signals(
        lambda: loads.append(1) or suspect, records, out / "signals" / "suspect", config=cfg
    )
    assert loads == [1]
    np.testing.assert_allclose(resumed.hidden, again.hidden, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(resumed.grad, again.grad, rtol=1e-4, atol=1e-6)
    kept = {p.name: p.stat().st_mtime_ns for p in chunks if p != chunks[1]}
    assert all(full[k] == v for k, v in kept.items())  # finished chunks were not rewritten
    # another configuration in the same folder is refused, not mixed
    with pytest.raises(MnemoscopeError, match="other extraction settings"):
        extract_signals(
            suspect, records, out / "signals" / "suspect", config=AuditConfig(k=32, position="mean")
        )


def test_prompts_without_targets_error_when_drift_requested(lm, tmp_path):
    from mnemoscope.pipelines.scar import AuditConfig, read_battery, run_audit

    battery = _battery(tmp_path / "b.jsonl", targets=False)
    with pytest.raises(InputError, match="target"):
        run_audit(lm, lm, battery, tmp_path / "o", config=AuditConfig(k=32, progress=False), plots=False)
    recs = read_battery(battery, require_target=False)
    assert recs[0].target is None
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x1", "prompt": "hi", "target": "a"}\n{"id": "x2", "target": "b"}\n')
    with pytest.raises(InputError, match=r"x2.*prompt"):
        read_battery(bad)


def test_different_architectures_raise(lm, tmp_path):
    from helpers import tiny_lm
    from mnemoscope.pipelines.scar import AuditConfig, run_audit

    battery = _battery(tmp_path / "b.jsonl")
    other = tiny_lm("llama", layers=5)
    with pytest.raises(MnemoscopeError, match="layers"):
        run_audit(
            other,
            tiny_lm("llama", layers=4),
            battery,
            tmp_path / "o",
            config=AuditConfig(k=32, progress=False),
            plots=False,
        )
    # with loaders (as the CLI passes them) the anchor is refused before its signals are extracted
    with pytest.raises(MnemoscopeError, match="layers"):
        run_audit(
            lambda: other,
            lambda: tiny_lm("llama", layers=4),
            battery,
            tmp_path / "lazy",
            config=AuditConfig(k=32, progress=False, n_permutations=9, n_bootstrap=2),
            plots=False,
        )
    assert list((tmp_path / "lazy" / "signals" / "suspect").glob("chunk-*.npz"))
    assert not list((tmp_path / "lazy" / "signals" / "anchor").glob("chunk-*.npz"))


def test_shipped_battery_is_valid():
    from mnemoscope.pipelines.scar import default_battery_path, read_battery

    recs = read_battery(default_battery_path())
    assert len(recs) >= 120
    cats = {r.category for r in recs}
    assert {"math", "commonsense", "translation", "natural"} <= cats
    assert all(r.target for r in recs)


def test_cli_scar_audit_on_a_tiny_folder(tmp_path, capsys):
    import argparse

    from helpers import tiny_model, tiny_tokenizer
    from mnemoscope.cli import scar_cmd

    tiny_folder = tmp_path / "tiny4"
    tiny_model("llama", layers=4).save_pretrained(tiny_folder)
    tiny_tokenizer().save_pretrained(tiny_folder)

    parser = argparse.ArgumentParser()
    parser.add_argument("--cache-dir", default=str(tmp_path / "cache"))
    parser.add_argument("--quiet", action="store_true")
    scar_cmd.register(parser.add_subparsers(dest="command"))
    battery = _battery(tmp_path / "b.jsonl")
    out = tmp_path / "card"
    args = parser.parse_args(
        [
            *("--quiet", "scar", "audit", "--suspect", str(tiny_folder), "--anchor", str(tiny_folder)),
            *("--prompts", str(battery), "--out", str(out), "--k", "32", "--n-permutations", "19"),
            *("--n-bootstrap", "5", "--no-plots"),
        ]
    )
    assert args.func(args) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["bands"] == [] and summary["rupture_layer"] is None
    card = json.loads((out / "card.json").read_text())
    assert card["settings"]["n_prompts"] == 40 and card["bands"] == []
    bad = parser.parse_args(
        ["scar", "audit", "--suspect", "x", "--anchor", "y", "--out", str(out), "--k", "many"]
    )
    with pytest.raises(InputError, match="--k"):
        bad.func(bad)


def test_whitened_length_when_rows_outnumber_dimensions():
    # n > d: Ledoit-Wolf may pick (almost) no shrinkage and the n x n Gram is singular
    from sklearn.covariance import ledoit_wolf

    rng = np.random.default_rng(5)
    H = rng.normal(size=(200, 3, 4)) * np.array([1.0, 2.0, 3.0, 4.0])
    L = sp.thermodynamic_length(H)
    mu = np.median(H, axis=0)
    for s in range(2):
        cov, _ = ledoit_wolf(H[:, s])
        d = mu[s + 1] - mu[s]
        assert L[s] == pytest.approx(np.sqrt(d @ np.linalg.solve(cov, d)), rel=1e-5)


def test_a_state_without_variance_is_harmless():
    # prompts ending in the same token share their embedding state exactly
    H, G = _trajectory()
    H[:, 0] = 1.5
    sig = sp.layer_signals(H, G, k=32)
    assert np.isfinite(sig.slope).all() and np.isfinite(sig.length).all()
    res = ScarDetector(**FAST).fit(_data(H, G)).audit(_data(H, G))
    assert res.bands == [] and np.isfinite(res.per_layer["T"]).all()


def test_card_figures_show_the_band_and_bh_markers(banded, tmp_path):
    from mnemoscope.report.scar_card import write_card
    from mnemoscope.report.scar_plots import FIGURES, heatmap_figure, surface, trajectory_figure

    card = write_card(banded, tmp_path / "card", plots=True)
    for name in FIGURES:
        png = tmp_path / "card" / f"{name}.png"
        assert png.is_file() and png.stat().st_size > 10_000, name
    assert card["bands"] == [[6, 7]]
    # the band is shaded on every trajectory panel: an axvspan from 5.5 to 7.5
    for ax in trajectory_figure(banded).axes:
        spans = [p.get_x() for p in ax.patches]
        assert 5.5 in spans
    # the heatmap marks exactly the BH-significant layers
    sig = banded.layers[banded.per_layer["q"] <= 0.05]
    assert len(sig) > 0
    marks = [
        c.get_offsets()[:, 0] for c in heatmap_figure(banded).axes[0].collections if len(c.get_offsets())
    ]
    assert len(marks) == 1 and sorted(marks[0].tolist()) == sorted(sig.tolist())
    s = surface(banded.per_layer["T"])
    assert s.min() == 0.0 and s.max() == 1.0 and np.argmax(s) == np.argmax(banded.per_layer["T"])
    html = (tmp_path / "card" / "card.html").read_text()
    assert "6-7" in html and "<script src" not in html and "<link" not in html  # self-contained
