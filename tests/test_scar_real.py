"""SCAR on the real embedded model (SmolLM2-135M): a few prompts, fast checks."""

from __future__ import annotations

import numpy as np
import pytest

from mnemoscope.detectors.scar import ScarDetector
from mnemoscope.pipelines.scar import AuditConfig, default_battery_path, extract_signals, read_battery
from mnemoscope.trace.gradients import encode_pair, gradient_batch

pytestmark = pytest.mark.real_model


def test_real_gradients_every_layer_and_batching_is_exact(real_lm):
    tok = real_lm.tokenizer
    pairs = [encode_pair(tok, "The capital of France is", "Paris"), encode_pair(tok, "2 + 2 =", "4")]
    g = gradient_batch(real_lm, pairs)
    assert g.grad.shape == (2, 31, 576) and g.hidden.shape == (2, 31, 576)
    assert np.isfinite(g.grad).all() and (np.linalg.norm(g.grad, axis=-1) > 0).all()
    assert (g.logp < 0).all()
    # the left-padded batch gives each row the same gradient as running it alone
    alone = gradient_batch(real_lm, pairs[1:])
    np.testing.assert_allclose(g.grad[1], alone.grad[0], rtol=1e-3, atol=1e-6)
    np.testing.assert_allclose(g.logp[1], alone.logp[0], rtol=1e-4)
    # the default model answers the capital question: Paris is likely
    assert g.logp[0] > -3.0


def test_real_extraction_and_self_audit_has_no_band(real_lm, tmp_path):
    records = read_battery(default_battery_path())[::20][:6]
    cfg = AuditConfig(k=4, batch_size=6, chunk_size=6, n_permutations=19, n_bootstrap=5, progress=False)
    data = extract_signals(real_lm, records, tmp_path / "sig", config=cfg, role="suspect")
    assert data.hidden.shape == (6, 31, 576) and data.grad is not None
    again = extract_signals(lambda: pytest.fail("must not reload"), records, tmp_path / "sig", config=cfg)
    np.testing.assert_array_equal(again.hidden, data.hidden)
    res = ScarDetector(k=4, n_permutations=19, n_bootstrap=5).fit(data).audit(data)
    assert res.bands == [] and res.rupture_layer is None
    assert list(res.layers) == list(range(2, 30))
    assert np.all(res.per_layer["p"] == 1.0)
