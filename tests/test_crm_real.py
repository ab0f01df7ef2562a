"""CRM on the real default model (SmolLM2-135M-Instruct): what tiny random models cannot catch."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module")
def real_folder(real_lm, tmp_path_factory):
    from mnemoscope.bench.suites import membership_documents
    from mnemoscope.data.records import Record
    from mnemoscope.pipelines.crm.extract import CRMExtractConfig, extract, load_folder

    docs = membership_documents()[:6]
    recs = [Record(d.id, d.text, d.text[:100], d.label, query_defaulted=True) for d in docs]
    out = tmp_path_factory.mktemp("crm-real")
    cfg = CRMExtractConfig(max_new_tokens=8, batch_size=6, attention_flow=True, static=True)
    info = extract(real_lm, recs, out, cfg, progress=False)
    return info, load_folder(out)


def test_instruct_model_gets_its_chat_template_and_real_answers(real_folder):
    """Without its chat template SmolLM2-Instruct answers 'Answer:' with end-of-turn at once
    (T = 1), which makes every KL statistic degenerate; chat='auto' must prevent that."""
    info, folder = real_folder
    assert info["settings"]["chat"] is True
    assert all(p.n_steps == 8 for p in folder.pairs)
    assert all(p.answer_with.strip() and p.answer_without.strip() for p in folder.pairs)


def test_real_shapes_and_invariants(real_folder, real_lm):
    _, folder = real_folder
    d = folder.data
    assert d.disp.shape == (6, 31, 576)
    assert np.all(d.disp[:, 0] == 0)  # the embedding of the same last token
    assert np.all(np.linalg.norm(d.disp[:, 1:], axis=-1) > 0)
    assert d.surface_names[0] == "l1_embed_dist" and np.all((d.surface[:, 0] >= 0) & (d.surface[:, 0] <= 2))
    ll = d.extras["logit_lens_kl"]
    assert ll.shape == (6, 31) and np.all(ll[:, 0] < 1e-9)
    # the logit lens of the final row is the model's own next-token distribution: its KL is
    # the first generated step's KL(with || without)
    np.testing.assert_allclose(ll[:, -1], [p.kl_steps[0] for p in folder.pairs], rtol=2e-3, atol=2e-4)
    af = d.extras["attn_flow"]
    assert af.shape == (6, 30) and np.all((af > 0) & (af <= 1.0 + 1e-5))


def test_real_artifact_refuses_other_model(real_folder, lm, tmp_path):
    from mnemoscope.detectors.crm import crm_pipeline
    from mnemoscope.detectors.crm_artifact import from_pipeline, load_crm, save_crm
    from mnemoscope.errors import ModelMismatchError

    info, folder = real_folder
    pipe = crm_pipeline(levels=("l2", "l3")).fit(folder.data, folder.data.labels)
    art = from_pipeline(pipe, model=info["model"], settings={})
    path = save_crm(art, tmp_path / "crm.npz")
    assert load_crm(path, model=info["model"]).predict_proba(folder.data).shape == (6,)
    with pytest.raises(ModelMismatchError, match="SmolLM2"):
        load_crm(path, model=lm.info)
