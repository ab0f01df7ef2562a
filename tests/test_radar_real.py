"""RADAR on the embedded default model (SmolLM2-135M): what tiny random models cannot show."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mnemoscope.detectors.radar import (
    RadarArtifact,
    RadarEnsemble,
    load_radar,
    save_radar,
)
from mnemoscope.errors import ModelMismatchError
from mnemoscope.features.radar import FEATURE_NAMES, RadarFeatureConfig, radar_features
from mnemoscope.pipelines import radar as rev
from mnemoscope.trace.interventions import RadarCaptureConfig, capture_radar

pytestmark = pytest.mark.real_model


def test_real_capture_and_measured_features(real_lm):
    info = real_lm.info
    traces = capture_radar(real_lm, ["The capital of France is"], RadarCaptureConfig(measured=True))
    t = traces[0]
    assert t.attentions.shape[:2] == (info.n_layers, info.n_heads) and t.states.shape[0] == info.n_layers + 1
    # the final-norm lens at the last layer reproduces the model's own next-token distribution
    assert t.confidence[-1] == pytest.approx(t.final_confidence, abs=1e-4)
    assert t.confidence[-1] > 0.2  # a well-known fact: the model is confident at the output
    assert t.effects is not None
    assert t.effects.patching[-1] == pytest.approx(t.effects.corruption, abs=1e-3)
    for fs in ("paper", "measured"):
        f = radar_features(t, RadarFeatureConfig(feature_set=fs))
        assert list(f) == list(FEATURE_NAMES) and all(math.isfinite(v) for v in f.values())


def test_real_ensemble_on_shipped_training_set(real_lm, tmp_path):
    prompts = rev.read_prompts(rev.shipped_path("train"), require_label=True)
    rows, errors = rev.extract_features(real_lm, prompts, tmp_path / "f.jsonl", progress=False)
    assert len(rows) == 30 and not errors
    X, y = rev.feature_matrix(rows)
    cv = rev.cv_accuracy(X, y, n_splits=5, seed=0, n_resamples=200)
    assert cv["estimate"] > 0.6  # loose sanity bound; the measured value is in docs/radar.md
    ens = RadarEnsemble().fit(X, y)
    path = save_radar(
        RadarArtifact(ens, real_lm.info.to_dict(), {"feature_set": "paper"}), tmp_path / "r.joblib"
    )
    assert np.array_equal(
        load_radar(path, fingerprint=real_lm.info.fingerprint).ensemble.predict(X), ens.predict(X)
    )
    with pytest.raises(ModelMismatchError):
        load_radar(path, fingerprint="0" * 64, name="another model")
