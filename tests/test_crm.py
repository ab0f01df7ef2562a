"""CRM: features, estimators, protocols, artefact, extraction, interventions, CLI (tiny models)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from mnemoscope.detectors.crm import (
    ConcatPCA,
    CRMFeaturizer,
    CRMMethod,
    DisplacementNorms,
    ExtraFeatures,
    LTSProjector,
    LTSSummary,
    RawProbe,
    crm_pipeline,
    select_layers,
)
from mnemoscope.detectors.crm_artifact import from_pipeline, load_crm, save_crm
from mnemoscope.errors import InputError, ModelMismatchError
from mnemoscope.features.crm import (
    KL_FEATURES,
    CRMData,
    crm_data_from_pairs,
    embedding_distance,
    kl_aggregates,
)
from mnemoscope.pipelines.crm.eval import CRMEvalConfig, crm_methods, evaluate, run_method
from mnemoscope.stats import cross_val_scores

# --------------------------------------------------------------------------- synthetic data


def synthetic(n=80, layers=5, d=16, signal=2.0, seed=0, signal_layers=(2, 3)) -> CRMData:
    """Displacements with a member shift along a fixed unit vector at ``signal_layers``."""
    rng = np.random.default_rng(seed)
    y = np.repeat([0, 1], n // 2)
    disp = rng.normal(size=(n, layers, d)).astype(np.float32)
    disp[:, 0] = 0.0  # the embedding row: identical last token, zero displacement
    u = np.zeros(d)
    u[0] = 1.0
    for layer in signal_layers:
        disp[:, layer] += (signal * y[:, None] * u).astype(np.float32)
    surface = np.column_stack([rng.random(n), rng.normal(size=(n, 6))])
    return CRMData(
        ids=tuple(f"r{i}" for i in range(n)),
        labels=y,
        disp=disp,
        surface=surface,
        surface_names=("l1_embed_dist", *KL_FEATURES),
        extras={"logit_lens_kl": rng.random((n, layers)), "static_hidden": rng.normal(size=(n, d))},
    )


# --------------------------------------------------------------------------- features


def test_kl_aggregates_known_values():
    out = kl_aggregates([0.0, 1.0, 2.0, 3.0, 4.0])
    assert out.tolist() == pytest.approx([2.0, 4.0, 2.0, 1.0, 3.5, 1.0])  # split at ceil(5/2) = 3
    assert kl_aggregates([5.0]).tolist() == [5.0, 5.0, 0.0, 5.0, 0.0, 0.0]
    assert kl_aggregates([1.0, 3.0], split=32)[4] == 0.0  # the paper's split: empty late segment
    with pytest.raises(InputError, match="empty"):
        kl_aggregates([])
    with pytest.raises(InputError, match="non-finite"):
        kl_aggregates([1.0, np.nan])


def test_embedding_distance():
    d = embedding_distance([[1, 0], [1, 1], [0, 0]], [[2, 0], [-1, -1], [1, 0]])
    assert d.tolist() == pytest.approx([0.0, 2.0, 1.0])


def test_crm_data_subset_and_errors():
    data = synthetic(n=10)
    sub = data.subset(np.array([0, 9]))
    assert (
        sub.ids == ("r0", "r9")
        and sub.disp.shape == (2, 5, 16)
        and sub.extras["static_hidden"].shape == (2, 16)
    )
    with pytest.raises(InputError, match="not extracted"):
        data.extra("attn_flow")
    with pytest.raises(InputError, match="disp"):
        CRMData(("a",), None, np.zeros((2, 3, 4)), np.zeros((1, 0)), ())


# --------------------------------------------------------------------------- layers and directions


def test_select_layers_variance_share_and_errors():
    data = synthetic(signal=0.0)
    scale = np.array([0.0, 0.001, 1.0, 1.0, 1.0])[None, :, None]
    assert select_layers(data.disp * scale).tolist() == [2, 3, 4]
    assert select_layers(data.disp * scale, "all").tolist() == [1, 2, 3, 4]
    with pytest.raises(InputError, match="zero-variance"):
        select_layers(np.zeros((10, 3, 4)))
    with pytest.raises(InputError, match="no layer passes"):
        select_layers(data.disp, threshold=0.9)
    assert select_layers(data.disp, "pc1_ratio", threshold=0.0).tolist() == [1, 2, 3, 4]


def test_lts_projection_known_direction():
    rng = np.random.default_rng(1)
    n, d = 50, 8
    u = np.zeros(d)
    u[3] = 1.0
    a = rng.normal(size=n) * 5
    disp = np.zeros((n, 2, d), dtype=np.float32)
    disp[:, 1] = (a[:, None] * u + 0.01 * rng.normal(size=(n, d))).astype(np.float32)
    data = CRMData(tuple(map(str, range(n))), None, disp, np.zeros((n, 0)), ())
    proj = LTSProjector(layers=[1]).fit(data)
    v = proj.directions_[0]
    assert abs(abs(v[3]) - 1.0) < 1e-3
    assert (disp[:, 1].astype(np.float64) @ v).mean() >= 0  # orientation rule
    np.testing.assert_allclose(proj.transform(data)[:, 0], disp[:, 1].astype(np.float64) @ v, rtol=1e-6)
    with pytest.raises(InputError, match=r"layer\(s\) \[7\]"):
        LTSProjector(layers=[7]).fit(data)


def test_mean_diff_direction_and_label_check():
    data = synthetic(signal=3.0)
    proj = LTSProjector(direction="mean_diff", layers=[2]).fit(data, data.labels)
    assert proj.directions_[0][0] > 0.8  # the shift axis
    with pytest.raises(InputError, match="both classes"):
        LTSProjector(direction="mean_diff", layers=[2]).fit(data, np.ones(len(data)))


def test_pc_rank_beyond_samples_gives_zero_direction():
    data = synthetic(n=4, d=16)
    proj = LTSProjector(layers=[2], pc_rank=7).fit(data)
    assert np.all(proj.directions_ == 0)


@pytest.mark.parametrize(
    "est",
    [
        LTSProjector(),
        CRMFeaturizer(),
        LTSSummary(mode="top3"),
        LTSSummary(mode="pca2"),
        DisplacementNorms(mode="best"),
        RawProbe(kind="pca8"),
        ConcatPCA(n_components=2),
        ExtraFeatures(key="logit_lens_kl"),
    ],
)
def test_common_estimator_contract(est):
    data = synthetic()
    c = clone(est)
    assert c.get_params() == est.get_params()
    with pytest.raises(NotFittedError):
        clone(est).transform(data)
    fitted = clone(est).fit(data, data.labels)
    a = fitted.transform(data)
    b = clone(est).fit(data, data.labels).transform(data)
    np.testing.assert_array_equal(a, b)  # deterministic
    assert a.shape[0] == len(data) and np.isfinite(a).all()


def test_pipeline_separates_and_permutation_does_not():
    data = synthetic(n=120, signal=3.0)
    r = cross_val_scores(crm_pipeline(levels=("l3",)), data, data.labels, n_resamples=200)
    assert r.auc.estimate > 0.85
    yp = np.random.default_rng(0).permutation(data.labels)
    rp = cross_val_scores(crm_pipeline(levels=("l3",)), data.with_labels(yp), yp, n_resamples=200)
    assert abs(rp.auc.estimate - 0.5) < 0.2


def test_paper_protocol_leaks_and_leakage_free_does_not():
    """Pure noise, high dimension: the supervised direction fitted on a calibration subset
    that is also in the CV folds inflates AUC; fitted inside the folds it stays near 0.5."""
    data = synthetic(n=120, d=200, signal=0.0)
    pipe = crm_pipeline(levels=("l3",), direction="mean_diff")
    free = run_method(pipe, data, data.labels, CRMEvalConfig(n_resamples=100))
    paper = run_method(pipe, data, data.labels, CRMEvalConfig(protocol="paper", n_cal=100, n_resamples=100))
    assert free.protocol == "leakage-free" and paper.protocol == "paper"
    assert abs(free.auc.estimate - 0.5) < 0.15
    assert paper.auc.estimate > free.auc.estimate + 0.15


def test_bad_input_errors():
    data = synthetic(n=8)
    with pytest.raises(InputError, match="fewer than the 5 folds"):
        evaluate(data, CRMEvalConfig(n_resamples=50))
    single = data.with_labels(np.ones(8, dtype=int))
    with pytest.raises(InputError, match="both classes"):
        evaluate(single)
    zero = CRMData(data.ids, data.labels, np.zeros_like(data.disp), data.surface, data.surface_names)
    with pytest.raises(InputError, match="zero-variance"):
        crm_pipeline(levels=("l3",)).fit(zero, zero.labels)
    no_l1 = CRMData(data.ids, data.labels, data.disp, data.surface[:, 1:], KL_FEATURES)
    with pytest.raises(InputError, match="Level 1"):
        CRMFeaturizer().fit(no_l1)
    f = CRMFeaturizer(levels="available").fit(no_l1)
    names = list(f.get_feature_names_out())
    assert names[:6] == list(KL_FEATURES) and all(n.startswith("lts_L") for n in names[6:])
    assert f.transform(no_l1).shape[1] == len(names)


def test_methods_list_respects_extras():
    data = synthetic()
    names = [m.name for m in crm_methods(CRMEvalConfig(), data)]
    assert {"crm_lr", "crm_xgb", "static_mia_lr", "logit_lens_lr"} <= set(names)
    assert "attn_flow_lr" not in names and "grad_norm_lr" not in names  # not extracted here


def test_evaluate_report_contract():
    data = synthetic(n=60, signal=3.0)
    rep = evaluate(
        data, CRMEvalConfig(n_resamples=50, n_permutations=2, pc_ranks=2, pca_dims=(1, 2)), progress=False
    )
    assert rep["protocol"] == "leakage-free"
    for m in rep["methods"]:
        assert "roc_auc" in rep[m] and len(rep[m]["roc_auc_ci"]) == 2
    assert rep["crm_lr"]["roc_auc"] > 0.75
    a = rep["analyses"]
    assert {r["layer"] for r in a["layer_sweep"]["layers"]} == {1, 2, 3, 4}
    assert set(a["layer_sweep"]["best"][:2]) == {2, 3}
    assert len(a["permutation"]["aucs"]) == 2
    assert len(rep["oof_scores"]["crm_lr"]) == 60
    json.dumps(rep)  # serialisable


def test_families_block_and_input_l1():
    """Each family is its own in-fold pipeline: the L3 signal shows in every family with L3 only."""
    from mnemoscope.pipelines.crm.eval import FAMILIES, family_entries, input_l1

    data = synthetic(n=60, signal=3.0)
    y = np.asarray(data.labels)
    c = CRMEvalConfig(n_resamples=50)
    rng = np.random.default_rng(1)
    ctx, qry = rng.normal(size=(60, 8)), rng.normal(size=(60, 8))
    l1_in = input_l1(ctx, qry)
    np.testing.assert_allclose(l1_in, embedding_distance(ctx, qry))
    fam = family_entries(data, y, c, l1_input=l1_in)
    rows = {r["family"]: r for r in fam["rows"]}
    assert list(rows) == [name for name, _ in FAMILIES] + ["L1(input)"]
    for name, r in rows.items():
        assert len(r["roc_auc_ci"]) == 2 and len(r["fold_aucs"]) == 5, name
    for name in ("L3", "L1+L3", "L2+L3", "L1+L2+L3"):
        assert rows[name]["roc_auc"] > 0.8, name
    for name in ("L1", "L2", "L1+L2", "L1(input)"):
        assert rows[name]["roc_auc"] < 0.75, name
    # the full family is crm_lr (same pipeline, same folds)
    full = run_method(crm_pipeline(levels=("l1", "l2", "l3")), data, y, c)
    assert rows["L1+L2+L3"]["roc_auc"] == full.auc.estimate
    no_input = family_entries(data, y, c)["rows"][-1]
    assert no_input["roc_auc"] is None and "encoder" in no_input["error"]
    no_l1 = CRMData(data.ids, data.labels, data.disp, data.surface[:, 1:], KL_FEATURES)
    r1 = {r["family"]: r for r in family_entries(no_l1, y, c)["rows"]}
    assert r1["L1"]["roc_auc"] is None and "Level 1" in r1["L1"]["error"]
    assert r1["L2+L3"]["roc_auc"] > 0.8


def test_evaluate_blind_baselines_and_shift_fields():
    """crm eval's blind baselines read the contexts (never the model); the shift fields come
    from the diagnostic; no text = skipped and said; blind=False = the 'not measured' fields."""
    from mnemoscope.report.crm import crm_markdown

    data = synthetic(n=60, signal=0.0)
    y = np.asarray(data.labels)
    texts = [
        f"In the year {1880 + i % 25} the mill was whereupon restored, as the elders did decree."
        if lab
        else f"In {2031 + i % 25} the mill got upgraded, and the council posted an update online."
        for i, lab in enumerate(y)
    ]
    c = CRMEvalConfig(n_resamples=50)
    rep = evaluate(data, c, texts=texts, analyses=False, progress=False, blind=True, families=False)
    b = rep["blind"]
    assert [e["method"] for e in b["entries"]] == ["blind_tfidf", "blind_date", "blind_embedding"]
    assert rep["shift_warning"] is True and "text alone" in rep["shift_reason"]
    assert b["best_blind_auc"] > 0.95 and len(rep["oof_scores"]["blind_tfidf"]) == 60
    md = crm_markdown(rep)
    assert "Shift warning" in md and "AUC - best blind" in md and "## Blind baselines" in md
    json.dumps(rep)
    none = evaluate(data, c, texts=None, analyses=False, progress=False, blind=True, families=False)
    assert none["shift_warning"] is False and "not measured" in none["shift_reason"]
    assert "no text" in none["blind"]["skipped"]
    assert all(e["status"] == "not measured" for e in none["blind"]["entries"])
    off = evaluate(data, c, texts=texts, analyses=False, progress=False, families=False)
    assert (
        off["shift_warning"] is False
        and off["blind"]["entries"] == []
        and "--no-blind" in off["blind"]["skipped"]
    )


# --------------------------------------------------------------------------- artefact


@pytest.mark.parametrize("kind", ["lr", "xgb"])
def test_artifact_round_trip(tmp_path, kind):
    data = synthetic(n=60, signal=1.5)
    pipe = crm_pipeline(classifier=kind).fit(data, data.labels)
    model = {"name": "tiny", "fingerprint": "abc123"}
    art = from_pipeline(pipe, model=model, settings={"levels": ["l1", "l2", "l3"]})
    path = save_crm(art, tmp_path / "crm.npz")
    loaded = load_crm(path, model=model)
    np.testing.assert_allclose(
        loaded.predict_proba(data), pipe.predict_proba(data)[:, 1], rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(loaded.lts(data.disp), pipe.named_steps["features"].projector_.transform(data))
    z, flagged, score = loaded.anomaly(loaded.lts(data.disp[0]))
    assert z.shape == flagged.shape == loaded.layers.shape and score >= 0
    with pytest.raises(ModelMismatchError, match="fitted on tiny"):
        load_crm(path, model={"name": "other", "fingerprint": "zzz"})


def test_artifact_tamper_detected(tmp_path):
    data = synthetic(n=40)
    art = from_pipeline(crm_pipeline().fit(data, data.labels), model={"fingerprint": "f"}, settings={})
    path = save_crm(art, tmp_path / "crm.npz")
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["directions"] = arrays["directions"] * 2
    np.savez(path, **arrays)
    with pytest.raises(InputError, match="hash mismatch"):
        load_crm(path)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(InputError, match="not a CRM artefact"):
        load_crm(tmp_path / "junk.npz")


# --------------------------------------------------------------------------- model-backed (tiny llama)


@pytest.fixture(scope="module")
def tiny_crm(tmp_path_factory):
    from helpers import tiny_lm
    from mnemoscope.data.records import Record
    from mnemoscope.pipelines.crm.extract import CRMExtractConfig, extract, load_folder

    # a private model: asking for attention weights makes transformers install permanent
    # output-recording hooks, which must not leak into the shared `lm` fixture
    lm = tiny_lm("llama")
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "zeta"]
    recs = [
        Record(f"d{i}", " ".join(rng.choice(words, size=8)) + ".", "", i % 2, query_defaulted=True)
        for i in range(12)
    ]
    recs = [Record(r.id, r.context, r.context[:20], r.label, query_defaulted=True) for r in recs]
    out = tmp_path_factory.mktemp("crm") / "f"
    cfg = CRMExtractConfig(max_new_tokens=4, batch_size=4, embedder="none")
    info = extract(lm, recs, out, cfg, progress=False)
    return lm, recs, out, info, load_folder(out)


def test_extract_folder(tiny_crm):
    lm, _, _, info, folder = tiny_crm
    assert info["n_traced"] == 12 and info["settings"]["chat"] is True  # tiny tokenizer has a chat template
    d = folder.data
    assert d.disp.shape == (12, lm.info.n_layers + 1, lm.info.hidden_size)
    assert np.all(d.disp[:, 0] == 0)  # same last token on both paths
    ex = d.extras
    assert ex["logit_lens_kl"].shape == (12, lm.info.n_layers + 1) and np.all(
        ex["logit_lens_kl"][:, 0] < 1e-9
    )
    assert ex["attn_flow"].shape == (12, lm.info.n_layers)
    assert np.all((ex["attn_flow"] >= 0) & (ex["attn_flow"] <= 1 + 1e-5))
    assert ex["static_hidden"].shape == (12, lm.info.hidden_size)
    assert ex["grad_norm"].shape == (12, lm.info.n_layers + 1) and np.all(ex["grad_norm"] > 0)
    assert folder.token_stats is not None and len(folder.token_stats) == 12
    assert d.surface_names == KL_FEATURES  # embedder none: no Level 1


def test_extract_resumes_and_rejects_other_settings(tiny_crm):
    from mnemoscope.errors import TraceStoreError
    from mnemoscope.pipelines.crm.extract import CRMExtractConfig, extract

    lm, recs, out, _, _ = tiny_crm
    again = extract(
        lm, recs, out, CRMExtractConfig(max_new_tokens=4, batch_size=4, embedder="none"), progress=False
    )
    assert again["n_extras_computed"] == 0 and again["n_gradients_computed"] == 0
    with pytest.raises(TraceStoreError, match="other settings"):
        extract(
            lm, recs, out, CRMExtractConfig(template="B", max_new_tokens=4, embedder="none"), progress=False
        )


def test_attention_context_span(lm):
    from mnemoscope.pipelines.crm.extract import _context_span
    from mnemoscope.trace.tracer import Tracer

    tr = Tracer(lm)
    prompt = "Context: hello world\n\nQuestion: q\n\nAnswer:"
    ids = tr.encode(prompt)
    s, e = _context_span(lm.tokenizer, prompt, "hello world", ids)
    assert lm.tokenizer.decode(ids[s:e]) == "hello world"


def test_noise_and_patch_hooks(lm):
    from mnemoscope.trace.interventions import gaussian_noise, patched_last_token, perturbed_last_states
    from mnemoscope.trace.tracer import Tracer

    tr = Tracer(lm, batch_size=4)
    seqs = [tr.encode("abc def"), tr.encode("a longer prompt here")]
    lengths = [len(s) for s in seqs]
    clean = perturbed_last_states(tr, seqs, None)
    # transformers may keep its own output-recording hooks; ours must all be gone afterwards
    n_hooks = [len(b._forward_hooks) for b in lm.model.model.layers]
    g = torch.Generator().manual_seed(0)
    same = perturbed_last_states(tr, seqs, lambda ls: gaussian_noise(lm, [2], 0.0, ls, g))
    np.testing.assert_allclose(same, clean, atol=1e-6)
    noisy = perturbed_last_states(
        tr, seqs, lambda ls: gaussian_noise(lm, [2], 1.0, ls, torch.Generator().manual_seed(1))
    )
    assert np.allclose(noisy[:, :2], clean[:, :2], atol=1e-6)  # rows before the noised block unchanged
    assert not np.allclose(noisy[:, 2], clean[:, 2])
    vals = torch.zeros(2, lm.info.hidden_size)
    patched = perturbed_last_states(tr, seqs, lambda ls: patched_last_token(lm, 1, vals))
    np.testing.assert_allclose(patched[:, 1], 0.0, atol=1e-6)
    np.testing.assert_allclose(patched[:, 0], clean[:, 0], atol=1e-6)
    assert not np.allclose(patched[:, 2], clean[:, 2])
    with pytest.raises(InputError, match="out of range"):
        perturbed_last_states(tr, seqs, lambda ls: gaussian_noise(lm, [99], 0.1, ls, g))
    assert lengths == [len(s) for s in seqs]
    assert [len(b._forward_hooks) for b in lm.model.model.layers] == n_hooks  # ours removed


def test_causal_analyses_tiny(tiny_crm):
    from mnemoscope.pipelines.crm.causal import causal_analyses, vocab_back_projection

    lm, _, _, _, folder = tiny_crm
    c = CRMEvalConfig(n_splits=3, n_resamples=50)
    r = causal_analyses(
        lm, folder.pairs, folder.data, c, peak_layer=2, eps=(0.5,), batch_size=4, chat=True, progress=False
    )
    assert {row["block"] for row in r["noise"]} == {"early_control", "peak_block", "late_block", "peak_layer"}
    assert all(np.isfinite(row["delta"]) for row in r["noise"] + r["patching"])
    vocab = vocab_back_projection(lm, folder.data, c, k=3)
    assert vocab and all(len(row["tokens"]) == 3 for row in vocab)


def test_crm_method_in_registry(tiny_crm):
    from mnemoscope.detectors.base import METHODS, MembershipData

    _, _, _, _, folder = tiny_crm
    m = METHODS.build("crm_lr")
    assert isinstance(m, CRMMethod)
    labels = np.array([p.label for p in folder.pairs])
    data = MembershipData(
        ids=[p.id for p in folder.pairs],
        texts=[p.context for p in folder.pairs],
        labels=labels,
        pairs=folder.pairs,
    )
    m.level1 = "off"
    X = m.features(data)
    r = cross_val_scores(m.make_estimator(), X, labels, n_splits=3, n_resamples=50)
    assert r.oof_scores.shape == (12,)


def test_crm_data_from_pairs_layer_mismatch(tiny_crm):
    from dataclasses import replace

    _, _, _, _, folder = tiny_crm
    bad = replace(folder.pairs[1], h_with=folder.pairs[1].h_with[:2], h_without=folder.pairs[1].h_without[:2])
    with pytest.raises(InputError, match="differ from the first") as e:
        crm_data_from_pairs([folder.pairs[0], bad])
    assert e.value.record == folder.pairs[1].id


# --------------------------------------------------------------------------- CLI


def test_cli_eval_fit_contract(tmp_path, tiny_folder, capsys):
    from mnemoscope.cli.main import main

    rng = np.random.default_rng(3)
    words = ["red", "green", "blue", "cyan", "amber", "ivory"]
    lines = [
        json.dumps({"id": f"x{i}", "context": " ".join(rng.choice(words, size=6)), "label": i % 2})
        for i in range(12)
    ]
    lines.append(json.dumps({"id": "bad", "label": 1}))  # no context: skipped with a message
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "rep"
    common = ["--quiet", "--cache-dir", str(tmp_path / "c")]
    code = main([*common, "crm", "eval", "--model", str(tiny_folder), "--input", str(tmp_path / "in.jsonl"),
                 "--out", str(out), "-T", "3", "--embedder", "none", "--folds", "3", "--bootstrap", "50",
                 "--permutations", "2", "--no-causal", "--no-xgb"])  # fmt: skip
    cap = capsys.readouterr()
    err, out_text = cap.err, cap.out
    assert code == 0, err
    assert "line 13" in err and "context" in err
    rep = json.loads((out / "report.json").read_text())
    assert rep["protocol"] == "leakage-free"
    for m in ("crm_lr", "l1l2_lr", "lts_mean", "l2_multilayer", "raw_final_diff", "static_mia_lr", "loss",
              "logit_lens_lr", "attn_flow_lr", "grad_norm_lr"):  # fmt: skip
        assert "roc_auc" in rep[m] and "roc_auc_ci" in rep[m]
    assert isinstance(rep["shift_warning"], bool) and rep["shift_reason"]
    assert [e["method"] for e in rep["blind"]["entries"]] == ["blind_tfidf", "blind_date", "blind_embedding"]
    fam = {r["family"]: r for r in rep["families"]["rows"]}
    assert fam["L2+L3"]["roc_auc"] is not None and fam["L1"]["roc_auc"] is None  # --embedder none
    assert "shift diagnostic" in out_text or "WARNING" in out_text
    assert "family L2+L3" in out_text
    assert (out / "report.md").read_text().startswith("# CRM on")
    assert "## CRM's signal by feature family" in (out / "report.md").read_text()
    assert (out / "layer_auc.png").is_file() and (out / "roc.png").is_file()
    code = main([*common, "crm", "fit", "--traces", str(out / "traces"), "--out", str(tmp_path / "crm.npz"),
                 "--folds", "3", "--bootstrap", "50"])  # fmt: skip
    assert code == 0
    art = load_crm(tmp_path / "crm.npz")
    assert art.classifier == "lr" and "cv_roc_auc" in art.metrics
    code = main([*common, "crm", "fit", "--traces", str(out / "traces"), "--out", str(tmp_path / "x.npz"),
                 "--variance-threshold", "1.0"])  # fmt: skip
    assert code == 1 and "no layer passes" in capsys.readouterr().err
