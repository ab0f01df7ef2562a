"""RADAR: known-answer tests of the features, the ensemble rule, the scores, persistence,
interventions on tiny models, bad input and the CLI contract."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from helpers import tiny_lm
from mnemoscope.detectors.radar import (
    SCORE_DEFINITIONS,
    RadarArtifact,
    RadarEnsemble,
    RadarMethod,
    load_radar,
    save_radar,
)
from mnemoscope.errors import InputError, ModelMismatchError
from mnemoscope.features.radar import (
    CAUSAL_FEATURES,
    FEATURE_NAMES,
    MECHANISTIC_FEATURES,
    SURFACE_FEATURES,
    RadarFeatureConfig,
    attention_features,
    effective_rank,
    head_entropies,
    measured_causal_features,
    paper_causal_features,
    radar_features,
    surface_features,
    working_memory_features,
)
from mnemoscope.pipelines import radar as rev
from mnemoscope.trace.hooks import registered_hooks
from mnemoscope.trace.interventions import (
    AttentionUnavailableError,
    CausalEffects,
    RadarCaptureConfig,
    ablate_attention,
    ablate_heads,
    capture_radar,
    measure_effects,
)
from mnemoscope.trace.tracer import Tracer


@pytest.fixture(scope="module")
def rlm():
    """A private tiny llama: requesting attentions makes transformers install its own persistent
    output-capturing hooks, which must not leak into the shared session model other tests inspect."""
    return tiny_lm("llama")


# --------------------------------------------------------------------------- feature names


def test_feature_names_follow_appendix_d():
    assert len(SURFACE_FEATURES) == 16 and len(MECHANISTIC_FEATURES) == 21 and len(FEATURE_NAMES) == 37
    assert len(set(FEATURE_NAMES)) == 37
    assert FEATURE_NAMES[0] == "mean_confidence" and FEATURE_NAMES[15] == "layer_consistency"
    assert FEATURE_NAMES[16] == "num_specialized_heads" and FEATURE_NAMES[-1] == "activation_patching_effect"
    assert set(CAUSAL_FEATURES) <= set(MECHANISTIC_FEATURES) and len(CAUSAL_FEATURES) == 10


# --------------------------------------------------------------------------- surface


def test_surface_features_known_values():
    c = np.array([0.1, 0.3, 0.2, 0.6])
    h = np.array([4.0, 3.0, 3.5, 1.0])
    f = surface_features(c, h)
    std = math.sqrt(0.14 / 3)
    assert f["mean_confidence"] == pytest.approx(0.3)
    assert f["std_confidence"] == pytest.approx(std)
    assert f["max_confidence"] == pytest.approx(0.6) and f["min_confidence"] == pytest.approx(0.1)
    assert f["confidence_range"] == pytest.approx(0.5)
    assert f["convergence_layer"] == 3 and f["convergence_speed"] == pytest.approx(0.25)
    assert f["confidence_slope"] == pytest.approx(0.7 / 5.0)  # sum (l - 2.5)(c - 0.3) / sum (l - 2.5)^2
    assert f["oscillation_count"] == 2  # diffs +0.2, -0.1, +0.4
    assert f["early_confidence"] == pytest.approx(0.2) and f["late_confidence"] == pytest.approx(0.4)
    assert f["prediction_stability"] == pytest.approx(1 - std)
    assert f["mean_entropy"] == pytest.approx(2.875)
    assert f["entropy_change"] == pytest.approx(-3.0) and f["information_gain"] == pytest.approx(3.0)
    assert f["layer_consistency"] == pytest.approx(1 - np.std(h, ddof=1))


def test_surface_edge_cases():
    # zero derivatives are dropped before counting sign changes: +, 0, - is one change
    assert surface_features(np.array([0.1, 0.2, 0.2, 0.1]), np.ones(4))["oscillation_count"] == 1
    # odd L: early = first floor(L/2) layers, late = the ceil(L/2) others
    f = surface_features(np.array([0.1, 0.2, 0.6]), np.ones(3))
    assert f["early_confidence"] == pytest.approx(0.1) and f["late_confidence"] == pytest.approx(0.4)
    # the first layer peaks: convergence layer 0, speed 1
    assert surface_features(np.array([0.9, 0.1]), np.ones(2))["convergence_speed"] == 1.0
    one = surface_features(np.array([0.5]), np.array([2.0]))
    assert one["std_confidence"] == 0.0 and one["confidence_slope"] == 0.0
    with pytest.raises(InputError):
        surface_features(np.array([0.1, 0.2]), np.array([1.0]))


# --------------------------------------------------------------------------- attention


def _uniform_causal(n_layers: int, n_heads: int, s: int) -> np.ndarray:
    a = np.tril(np.ones((s, s)))
    a /= a.sum(-1, keepdims=True)
    return np.broadcast_to(a, (n_layers, n_heads, s, s)).copy()


def test_head_entropy_normalisations():
    s = 6
    a = _uniform_causal(2, 3, s)
    rows = np.log(np.arange(1, s + 1))  # row i is uniform over i + 1 keys
    assert np.allclose(head_entropies(a, "row_mean"), rows.mean())
    assert np.allclose(head_entropies(a, "sum"), rows.sum())
    # one-hot attention has zero entropy under both
    onehot = np.zeros((1, 1, 3, 3))
    onehot[..., 0] = 1.0
    assert head_entropies(onehot, "row_mean")[0, 0] == 0.0 and head_entropies(onehot, "sum")[0, 0] == 0.0


def test_literal_sum_grows_with_length_and_changes_specialisation():
    # every row after the first splits 50/50: row entropy log 2; the literal sum is (S - 1) log 2
    s = 10
    a = np.zeros((1, 1, s, s))
    a[0, 0, 0, 0] = 1.0
    for i in range(1, s):
        a[0, 0, i, [0, i]] = 0.5
    row_mean = head_entropies(a, "row_mean")
    literal = head_entropies(a, "sum")
    assert literal[0, 0] == pytest.approx((s - 1) * math.log(2))
    assert row_mean[0, 0] == pytest.approx((s - 1) * math.log(2) / s)
    assert attention_features(row_mean)["num_specialized_heads"] == 1
    assert attention_features(literal)["num_specialized_heads"] == 0


def test_attention_and_paper_causal_formulas():
    he = np.array([[1.0, 2.0], [3.0, 2.0]])  # mean 2; layer means 1.5 and 2.5
    f = attention_features(he, threshold=1.5)
    assert f["num_specialized_heads"] == 1 and f["attention_entropy"] == pytest.approx(2.0)
    assert f["head_specialization_score"] == pytest.approx(1 - 2 / 3)
    assert f["factual_head_activation"] == pytest.approx(0.5)
    assert f["reasoning_head_activation"] == pytest.approx(2 / 3)
    p = paper_causal_features(he, threshold=1.5)
    assert p["effective_circuit_depth"] == 2 and p["causal_path_length"] == 2
    assert p["ablation_robustness"] == pytest.approx(1 - 2 / 5)
    assert p["intervention_sensitivity"] == pytest.approx(2 / 5)
    assert p["critical_component_count"] == 1
    assert paper_causal_features(np.full((2, 2), 3.0))["critical_component_count"] == 1  # max(1, 0)
    assert p["direct_logit_attribution"] == pytest.approx(0.2)  # mean of 0.15, 0.25
    assert p["indirect_effect_strength"] == pytest.approx(0.05)  # population std of 0.15, 0.25
    assert p["performance_degradation_slope"] == pytest.approx(0.05)
    assert p["causal_mediation_score"] == pytest.approx(0.2 * 0.05)
    assert p["activation_patching_effect"] == pytest.approx(0.2)


# --------------------------------------------------------------------------- working memory


def test_effective_rank_and_working_memory():
    assert effective_rank(np.eye(3)) == pytest.approx(3.0)
    assert effective_rank(np.ones((4, 5))) == pytest.approx(1.0)
    s0 = np.array([[1.0, 0.0], [1.0, 0.0]])  # rank 1, norms 1
    s1 = np.array([[2.0, 0.0], [0.0, 2.0]])  # rank 2, norms 2
    f = working_memory_features(np.stack([s0, s1]))
    v0, v1 = np.var(s0), np.var(s1)  # 0.25, 1.0
    assert f["hidden_state_variance"] == pytest.approx((v0 + v1) / 2)
    assert f["norm_growth_trajectory"] == pytest.approx(2.0)
    assert f["activation_flow_variance"] == pytest.approx(0.25)  # var of [1, 2]
    assert f["circuit_complexity"] == pytest.approx((v1 / v0) * 2.0, rel=1e-6)
    assert f["state_rank_evolution"] == pytest.approx(1.0)
    assert f["working_memory_complexity"] == f["state_rank_evolution"]


def test_measured_causal_known_values():
    eff = CausalEffects(
        unit="layer",
        ablation=np.array([0.0, 0.5, 2.0]),
        direct=np.array([0.0, 0.2, 1.0]),
        patching=np.array([0.0, 0.05, 1.5]),
        corruption=1.5,
        clean_logprob=-1.0,
    )
    f = measured_causal_features(eff, threshold=0.1)
    assert f["effective_circuit_depth"] == 2 and f["critical_component_count"] == 2
    assert f["causal_path_length"] == 1
    robust = (1 + math.exp(-0.5) + math.exp(-2.0)) / 3
    assert f["ablation_robustness"] == pytest.approx(robust)
    assert f["intervention_sensitivity"] == pytest.approx(1 - robust)
    assert f["performance_degradation_slope"] == pytest.approx(np.std([0.0, 0.5, 2.0]))
    assert f["direct_logit_attribution"] == pytest.approx(0.4)
    assert f["indirect_effect_strength"] == pytest.approx((0.0 + 0.3 + 1.0) / 3)
    assert f["causal_mediation_score"] == pytest.approx(0.4 * 1.3 / 3)
    assert f["activation_patching_effect"] == pytest.approx(1.55 / 3)
    heads = CausalEffects("head", np.array([[0.2, -0.1], [0.0, 0.05]]), np.zeros(2), np.zeros(2), 0.0, -1.0)
    g = measured_causal_features(heads)
    assert g["effective_circuit_depth"] == 1 and g["critical_component_count"] == 1
    assert g["indirect_effect_strength"] == pytest.approx((0.1 + 0.05) / 2)  # sum over heads per layer


# --------------------------------------------------------------------------- capture + interventions


def test_capture_on_tiny_model(rlm):
    lm = rlm
    traces = capture_radar(lm, ["hello world", "The capital of France is"], RadarCaptureConfig())
    t = traces[1]
    n_layers = lm.info.n_layers
    assert t.confidence.shape == (n_layers,) and t.entropy.shape == (n_layers,)
    assert t.attentions.shape[:2] == (n_layers, 4) and t.states.shape[0] == n_layers + 1
    # the final-norm lens at the last layer is the model's own next-token distribution
    assert t.confidence[-1] == pytest.approx(t.final_confidence, abs=1e-5)
    assert np.all(t.entropy <= math.log(lm.info.vocab_size) + 1e-9)
    f = radar_features(t)
    assert list(f) == list(FEATURE_NAMES) and all(math.isfinite(v) for v in f.values())
    # batched capture equals one-at-a-time
    single = capture_radar(lm, ["The capital of France is"])[0]
    assert np.allclose(single.confidence, t.confidence, atol=1e-5)
    raw = capture_radar(lm, ["The capital of France is"], RadarCaptureConfig(lens="raw"))[0]
    assert not np.allclose(raw.confidence, t.confidence)
    with pytest.raises(InputError, match="interventions"):
        radar_features(t, RadarFeatureConfig(feature_set="measured"))


def _n_hooks(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_patching_last_block_equals_corruption(rlm):
    lm = rlm
    before = _n_hooks(lm.model)
    eff, _top = measure_effects(
        lm, Tracer(lm).encode("The capital of France is"), RadarCaptureConfig(measured=True)
    )
    assert eff.patching[-1] == pytest.approx(eff.corruption, abs=1e-5)
    assert eff.ablation.shape == (lm.info.n_layers,) and eff.direct.shape == (lm.info.n_layers,)
    again, _ = measure_effects(
        lm, Tracer(lm).encode("The capital of France is"), RadarCaptureConfig(measured=True)
    )
    assert np.allclose(again.patching, eff.patching)  # the corruption is seeded
    assert _n_hooks(lm.model) == before  # every hook we registered is gone


def test_direct_effect_equals_ablation_when_nothing_follows():
    # with the MLPs silenced, the last layer's attention output reaches the logits only directly
    lm = tiny_lm("llama", seed=3)
    with torch.no_grad():
        for block in lm.model.model.layers:
            block.mlp.down_proj.weight.zero_()
    eff, _ = measure_effects(lm, Tracer(lm).encode("abc def"), RadarCaptureConfig(measured=True))
    assert eff.ablation[-1] == pytest.approx(eff.direct[-1], abs=1e-6)


def test_all_heads_ablated_equals_layer_ablated(rlm):
    lm = rlm
    tracer = Tracer(lm)
    seq = tracer.encode("hello there")
    blocks = lm.model.model.layers
    with registered_hooks(ablate_attention(blocks, {1: [0]})):
        a = tracer.forward([seq], hidden="none").logits
    heads = {(1, h): [0] for h in range(lm.info.n_heads)}
    with registered_hooks(ablate_heads(blocks, lm.info.n_heads, heads)):
        b = tracer.forward([seq], hidden="none").logits
    assert torch.allclose(a, b, atol=1e-5)
    eff, _ = measure_effects(lm, seq, RadarCaptureConfig(measured=True, ablation="head"))
    assert eff.ablation.shape == (lm.info.n_layers, lm.info.n_heads)


@pytest.mark.parametrize("arch", ["gpt2", "gemma3_text"])
def test_measured_features_other_architectures(arch):
    lm = tiny_lm(arch)
    t = capture_radar(lm, ["hello world"], RadarCaptureConfig(measured=True))[0]
    f = radar_features(t, RadarFeatureConfig(feature_set="measured"))
    assert all(math.isfinite(v) for v in f.values())


# --------------------------------------------------------------------------- bad input


def test_empty_and_too_long_prompts():
    lm = tiny_lm(max_positions=16)
    with pytest.raises(InputError, match="empty"):
        capture_radar(lm, ["   "])
    with pytest.raises(InputError, match="window"):
        capture_radar(lm, ["x" * 40])


def test_attentions_unavailable_is_a_clear_error(monkeypatch):
    lm = tiny_lm()
    lm.model.set_attn_implementation("sdpa")
    monkeypatch.setattr(lm.model, "set_attn_implementation", lambda impl: None)
    with pytest.raises(AttentionUnavailableError, match="attention weights"):
        capture_radar(lm, ["hello"])
    with pytest.raises(InputError, match="attention"):
        head_entropies(None)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- ensemble


def _toy(n: int = 40, d: int = 37, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.repeat([0, 1], n // 2)
    X = rng.normal(size=(n, d))
    X[:, 0] += 2.0 * y
    return X, y


class _Fixed:
    def __init__(self, labels, probs):
        self.labels, self.probs, self.classes_ = np.asarray(labels), np.asarray(probs), np.array([0, 1])

    def predict(self, X):
        return self.labels

    def predict_proba(self, X):
        return np.column_stack([1 - self.probs, self.probs])


def test_vote_and_probability_rule():
    X, y = _toy()
    ens = RadarEnsemble(n_estimators=10).fit(X, y)
    # votes[j] / probs[j]: model j's labels / P(recall) for 3 prompts
    votes = [[1, 1, 1], [1, 1, 0], [0, 0, 0], [0, 1, 0]]  # prompts get 2/4, 3/4 and 1/4 recall votes
    probs = [[0.9, 0.8, 0.4], [0.8, 0.6, 0.3], [0.6, 0.9, 0.2], [0.6, 0.4, 0.1]]
    ens.models_ = [(f"m{j}", _Fixed(votes[j], probs[j])) for j in range(4)]
    x3 = X[:3]
    assert ens.predict(x3).tolist() == [0, 1, 0]  # a 2-2 tie is not > 1/2: reasoning
    p = np.mean(probs, axis=0)  # [0.725, 0.675, 0.25]
    assert np.allclose(ens.predict_proba(x3)[:, 1], p)
    # conf = p for a recall vote, 1 - p for a reasoning vote (below 0.5 when vote and p disagree)
    assert np.allclose(ens.confidence(x3), [1 - p[0], p[1], 1 - p[2]])


def test_ensemble_is_an_sklearn_estimator():
    X, y = _toy()
    ens = RadarEnsemble(n_estimators=10, random_state=3)
    with pytest.raises(NotFittedError):
        ens.predict(X)
    assert ens.fit(X, y) is ens
    c = clone(ens)
    assert c.get_params() == ens.get_params() and not hasattr(c, "models_")
    p1 = ens.predict_proba(X)
    p2 = RadarEnsemble(n_estimators=10, random_state=3).fit(X, y).predict_proba(X)
    assert np.array_equal(p1, p2)
    assert (ens.predict(X) == y).mean() > 0.8
    with pytest.raises(InputError, match="shape"):
        ens.predict(X[:, :5])
    with pytest.raises(InputError, match="2 recall"):
        RadarEnsemble().fit(X[:21], np.r_[np.zeros(20), 1].astype(int))


def test_scores_are_our_documented_combinations():
    X, y = _toy()
    X[:, FEATURE_NAMES.index("effective_circuit_depth")] = 30.0  # a constant: left out
    ens = RadarEnsemble(n_estimators=10).fit(X, y)
    at_mean = ens.scores(ens.mean_[None, :])
    assert all(v[0] == pytest.approx(0.5) for v in at_mean.values())
    x = ens.mean_.copy()
    i = FEATURE_NAMES.index("early_confidence")
    x[i] += ens.scale_[i]  # +1 sd on one of the 7 RDS features, sign +
    from scipy.stats import norm

    assert ens.scores(x[None, :])["rds"][0] == pytest.approx((norm.cdf(1.0) + 6 * 0.5) / 7)
    j = FEATURE_NAMES.index("attention_entropy")
    x2 = ens.mean_.copy()
    x2[j] += ens.scale_[j]  # sign - in RDS, + in RCI
    s = ens.scores(x2[None, :])
    assert s["rds"][0] < 0.5 < s["rci"][0]
    # Mechanistic Score: 7 features; ablation_robustness enters with sign -, the others +
    k = FEATURE_NAMES.index("ablation_robustness")
    x3 = ens.mean_.copy()
    x3[k] += ens.scale_[k]
    assert ens.scores(x3[None, :])["mechanistic"][0] == pytest.approx((norm.cdf(-1.0) + 6 * 0.5) / 7)
    m = FEATURE_NAMES.index("activation_patching_effect")
    x4 = ens.mean_.copy()
    x4[m] += 2 * ens.scale_[m]
    assert ens.scores(x4[None, :])["mechanistic"][0] == pytest.approx((norm.cdf(2.0) + 6 * 0.5) / 7)
    # Circuit Complexity Score: 6 features, but the constant circuit depth is left out -> 5
    r = FEATURE_NAMES.index("state_rank_evolution")
    x5 = ens.mean_.copy()
    x5[r] -= ens.scale_[r]
    s5 = ens.scores(x5[None, :])
    assert s5["circuit_complexity"][0] == pytest.approx((norm.cdf(-1.0) + 4 * 0.5) / 5)
    assert s5["rds"][0] == pytest.approx(0.5) and s5["mechanistic"][0] == pytest.approx(0.5)  # not in them
    # every score stays in (0, 1) and rises monotonically along its own direction
    for score, terms in SCORE_DEFINITIONS.items():
        direction = np.zeros(len(FEATURE_NAMES))
        for name, sign in terms:
            direction[FEATURE_NAMES.index(name)] = sign * ens.scale_[FEATURE_NAMES.index(name)]
        steps = ens.mean_ + np.linspace(-3, 3, 7)[:, None] * direction
        vals = ens.scores(steps)[score]
        assert np.all(np.diff(vals) > 0) and np.all((vals > 0) & (vals < 1)), score
    # a feature list without any score feature gives 0.5
    small = RadarEnsemble(feature_names=("a", "b", "c"), n_estimators=5).fit(X[:, :3], y)
    assert small.scores(X[:2, :3])["mechanistic"].tolist() == [0.5, 0.5]


# --------------------------------------------------------------------------- persistence


def test_save_load_round_trip_and_mismatch(tmp_path):
    X, y = _toy()
    ens = RadarEnsemble(n_estimators=10).fit(X, y)
    model = {"name": "tiny", "fingerprint": "a" * 64}
    path = save_radar(RadarArtifact(ens, model, {"feature_set": "paper"}), tmp_path / "r.joblib")
    art = load_radar(path, fingerprint="a" * 64)
    assert np.array_equal(art.ensemble.predict_proba(X), ens.predict_proba(X))
    assert art.feature_names == list(FEATURE_NAMES) and art.settings["feature_set"] == "paper"
    with pytest.raises(ModelMismatchError, match="retrain"):
        load_radar(path, fingerprint="b" * 64, name="other")
    (tmp_path / "r.joblib.json").unlink()  # without the sidecar the stored identity still refuses
    with pytest.raises(ModelMismatchError):
        load_radar(path, fingerprint="b" * 64)
    assert load_radar(path, fingerprint="b" * 64, force=True).model["name"] == "tiny"
    (tmp_path / "junk.joblib").write_bytes(b"not a model")
    with pytest.raises(InputError, match="not a RADAR model"):
        load_radar(tmp_path / "junk.joblib")


# --------------------------------------------------------------------------- orchestration


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_read_prompts_validation(tmp_path):
    good = _write(tmp_path / "a.jsonl", [{"id": 1, "prompt": "p", "label": "recall", "category": "c"}])
    assert rev.read_prompts(good)[0] == rev.RadarPrompt("1", "p", 1, "c", 1)
    for bad, match in [
        ([{"id": "a", "prompt": ""}], "prompt"),
        ([{"id": "a", "prompt": "x"}, {"id": "a", "prompt": "y"}], "duplicate"),
        ([{"id": "a", "prompt": "x", "label": "maybe"}], "label"),
    ]:
        with pytest.raises(InputError, match=match):
            rev.read_prompts(_write(tmp_path / "b.jsonl", bad))
    with pytest.raises(InputError, match="required"):
        rev.read_prompts(_write(tmp_path / "c.jsonl", [{"id": "a", "prompt": "x"}]), require_label=True)


def test_shipped_sets_composition():
    train = rev.read_prompts(rev.shipped_path("train"), require_label=True)
    test = rev.read_prompts(rev.shipped_path("test"), require_label=True)
    large = rev.read_prompts(rev.shipped_path("large"), require_label=True)
    assert len(train) == 30 and sum(p.label == 1 for p in train) == 15
    cats = {c: sum(p.category == c for p in test) for c in {p.category for p in test}}
    assert cats == {"clear_recall": 20, "clear_reasoning": 20, "challenging": 30, "complex_reasoning": 30}
    assert all(p.label == 1 for p in test if p.category == "clear_recall")
    assert all(p.label == 0 for p in test if p.category in ("clear_reasoning", "complex_reasoning"))
    assert len(large) >= 300 and abs(sum(p.label == 1 for p in large) - len(large) / 2) < 20
    assert not {p.prompt for p in train} & {p.prompt for p in test}


def test_extract_features_resumes_and_refuses_other_settings(rlm, tmp_path, monkeypatch):
    lm = rlm
    prompts = [rev.RadarPrompt(f"p{i}", f"prompt number {i}", i % 2, "c") for i in range(4)]
    out = tmp_path / "f.jsonl"
    rows, errors = rev.extract_features(lm, prompts[:3], out, progress=False)
    assert len(rows) == 3 and not errors and len(out.read_text().splitlines()) == 3
    calls = []
    real = rev.capture_radar
    monkeypatch.setattr(
        rev, "capture_radar", lambda lm_, ps, *a, **k: calls.append(ps) or real(lm_, ps, *a, **k)
    )
    rows2, _ = rev.extract_features(lm, prompts, out, progress=False)
    assert calls == [["prompt number 3"]] and [r.id for r in rows2] == ["p0", "p1", "p2", "p3"]
    assert rows2[0].values == rows[0].values
    with pytest.raises(InputError, match="other settings"):
        rev.extract_features(lm, prompts, out, capture=RadarCaptureConfig(lens="raw"), progress=False)
    bad = [*prompts, rev.RadarPrompt("long", "y" * 600)]
    _, errs = rev.extract_features(tiny_lm(max_positions=64), bad, None, on_error="skip", progress=False)
    assert [e["id"] for e in errs] == ["long"]


def _rows(n: int = 40, seed: int = 0) -> list[rev.FeatureRow]:
    X, y = _toy(n, seed=seed)
    return [
        rev.FeatureRow(
            id=str(i),
            prompt="p",
            label=int(y[i]),
            category=("a" if i % 2 else "b"),
            n_tokens=5,
            final_confidence=float(0.3 * y[i] + 0.1 * (i % 3)),
            values={"paper": dict(zip(FEATURE_NAMES, X[i].tolist(), strict=True))},
        )
        for i in range(n)
    ]


def test_evaluate_report_contract():
    report, _ens, preds = rev.evaluate(_rows(40), _rows(30, seed=1), n_resamples=50, importance=False)
    for key in ("accuracy", "accuracy_by_category", "roc_auc", "cv_accuracy", "n_train", "n_test"):
        assert key in report
    assert (
        report["n_train"] == 40
        and report["n_test"] == 30
        and set(report["accuracy_by_category"]) == {"a", "b"}
    )
    assert 0 <= report["cv_accuracy_ci"][0] <= report["cv_accuracy"] <= report["cv_accuracy_ci"][1] <= 1
    assert report["baselines"]["final_confidence"]["accuracy"] > 0.6
    assert len(preds) == 30 and {"rds", "rci", "p_recall", "confidence"} <= set(preds[0])
    with pytest.raises(InputError, match="measured"):
        rev.feature_matrix(_rows(4), "measured")


def test_permutation_importance_on_held_out_folds():
    X, y = _toy(40, d=3)
    imp = rev.permutation_importance_cv(
        X,
        y,
        ["signal", "n1", "n2"],
        n_splits=4,
        n_repeats=3,
        estimator=RadarEnsemble(feature_names=("s", "a", "b"), n_estimators=10),
    )
    assert imp[0]["feature"] == "signal" and imp[0]["importance"] > 0.1


def test_contamination_auc_and_figure():
    r = rev.contamination_auc(np.array([0.9, 0.8, 0.2, 0.1]), np.array([1, 1, 0, 0]), n_resamples=20)
    assert r["roc_auc"] == 1.0 and r["n_injected"] == 2
    fig = rev.rds_rci_figure(np.array([0.2, 0.8]), np.array([0.7, 0.3]), np.array([0, 1]), ["x", "y"])
    assert fig.axes[0].get_xlabel().startswith("Recall Detection")


# --------------------------------------------------------------------------- leaderboard method


def test_radar_method_features_from_pairs():
    from mnemoscope.detectors.base import MembershipData
    from mnemoscope.trace.types import PairTrace

    rng = np.random.default_rng(0)

    def pair(i: int) -> PairTrace:
        z = np.zeros(2)
        return PairTrace(
            id=str(i),
            context="c",
            query="q",
            prompt_with="a",
            prompt_without="b",
            n_prompt_tokens_with=3,
            n_prompt_tokens_without=2,
            h_with=rng.normal(size=(4, 8)),
            h_without=rng.normal(size=(4, 8)),
            h_with_prenorm=None,
            h_without_prenorm=None,
            answer_ids=np.array([1, 2]),
            answer_with="x",
            kl_steps=z,
            kl_rev_steps=z,
            entropy_with=z,
            entropy_without=z,
            logprob_answer_with=z,
            logprob_answer_without=z,
            topk_ids_with=np.zeros((2, 3), int),
            topk_logprobs_with=np.full((2, 3), -1.0),
            topk_ids_without=np.zeros((2, 3), int),
            topk_logprobs_without=np.full((2, 3), -0.5),
            stopped_at_eos=False,
            identical_prompts=False,
        )

    m = RadarMethod(n_estimators=5)
    data = MembershipData(ids=["0", "1"], texts=["a", "b"], labels=np.array([0, 1]), pairs=[pair(0), pair(1)])
    F = m.features(data)
    assert F.shape == (2, 13) and np.isfinite(F).all() and F[0, -1] == -0.5
    assert len(m.make_estimator().feature_names) == 13 and m.supervised and "pairs" in m.requires
    # as the leaderboard uses it: built from a registry entry, scored out-of-fold
    from mnemoscope.detectors.base import MembershipMethod
    from mnemoscope.registry import Registry
    from mnemoscope.stats import cross_val_scores

    reg: Registry[MembershipMethod] = Registry("method", base=MembershipMethod)
    reg.register("radar", "mnemoscope.detectors.radar:RadarMethod", n_estimators=5)
    built = reg.build("radar")
    labels = np.repeat([0, 1], 10)
    many = MembershipData(
        ids=[str(i) for i in range(20)], texts=["t"] * 20, labels=labels, pairs=[pair(i) for i in range(20)]
    )
    cv = cross_val_scores(built.make_estimator(), built.features(many), labels, n_splits=2, n_resamples=20)
    assert cv.oof_scores.shape == (20,) and np.isfinite(cv.oof_scores).all()
    # and it is registered in the leaderboard's own method registry
    from mnemoscope.pipelines.leaderboard import METHODS

    assert "radar" in METHODS.names() and isinstance(METHODS.build("radar"), RadarMethod)


# --------------------------------------------------------------------------- CLI


def _cli(argv: list[str]) -> int:
    from mnemoscope.cli import main as m

    args = m.build_parser().parse_args(argv)
    return int(args.func(args) or 0)


def test_cli_eval_train_predict_contract(tiny_folder, tmp_path):
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma"]

    def recs(prefix: str, n: int) -> list[dict]:
        return [
            {
                "id": f"{prefix}{i}",
                "prompt": " ".join(rng.choice(words, 3)) + ("?" if i % 2 else "."),
                "label": i % 2,
                "category": "odd" if i % 2 else "even",
            }
            for i in range(n)
        ]

    train = _write(tmp_path / "train.jsonl", recs("a", 12))
    test = _write(tmp_path / "test.jsonl", recs("b", 6))
    out = tmp_path / "eval"
    base = ["--quiet", "radar"]
    assert (
        _cli(
            [
                *base,
                "eval",
                "--model",
                str(tiny_folder),
                "--train",
                str(train),
                "--test",
                str(test),
                "--out",
                str(out),
                "--no-importance",
                "--cv-folds",
                "3",
                "--n-resamples",
                "50",
            ]
        )
        == 0
    )
    report = json.loads((out / "report.json").read_text())
    for key in ("accuracy", "accuracy_by_category", "roc_auc", "cv_accuracy", "n_train", "n_test"):
        assert key in report
    assert report["n_train"] == 12 and report["n_test"] == 6 and (out / "rds_rci.png").is_file()
    # the persisted ensemble carries its feature list and the model's identity
    meta = json.loads((out / "radar.joblib.json").read_text())
    from mnemoscope.models import load_model

    fp = load_model(str(tiny_folder)).info.fingerprint
    assert meta["feature_names"] == list(FEATURE_NAMES) and meta["model"]["fingerprint"] == fp
    assert load_radar(out / "radar.joblib", fingerprint=fp).feature_names == list(FEATURE_NAMES)
    # --train defaults to the shipped 30-prompt training set
    out2 = tmp_path / "eval_default"
    argv = ["radar", "eval", "--model", str(tiny_folder), "--test", str(test), "--out", str(out2)]
    assert _cli([*base[:1], *argv, "--no-importance", "--cv-folds", "3", "--n-resamples", "20"]) == 0
    report2 = json.loads((out2 / "report.json").read_text())
    assert report2["n_train"] == 30 and report2["train"] == str(rev.shipped_path("train"))
    model = tmp_path / "radar.joblib"
    assert (
        _cli(
            [
                *base,
                "train",
                "--model",
                str(tiny_folder),
                "--input",
                str(train),
                "--out",
                str(model),
                "--cv-folds",
                "3",
            ]
        )
        == 0
    )
    preds = tmp_path / "preds.jsonl"
    assert (
        _cli(
            [
                *base,
                "predict",
                "--model",
                str(tiny_folder),
                "--radar",
                str(model),
                "--input",
                str(test),
                "--out",
                str(preds),
            ]
        )
        == 0
    )
    rows = [json.loads(x) for x in preds.read_text().splitlines()]
    assert len(rows) == 6 and rows[0]["prediction"] in ("recall", "reasoning")
    feats = tmp_path / "feats.jsonl"
    assert (
        _cli(
            [
                *base,
                "features",
                "--model",
                str(tiny_folder),
                "--input",
                str(test),
                "--out",
                str(feats),
                "--feature-set",
                "measured",
            ]
        )
        == 0
    )
    row = json.loads(feats.read_text().splitlines()[0])
    assert set(row["features"]) == {"paper", "measured"} and len(row["features"]["measured"]) == 37
