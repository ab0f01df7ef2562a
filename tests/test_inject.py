"""LoRA injection on a tiny model: trains, saves the adapter only, loads as a sibling, resumes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers import tiny_lm
from mnemoscope.bench.inject import InjectConfig, inject, read_training_record
from mnemoscope.errors import InputError
from mnemoscope.models import load_model
from mnemoscope.trace import Capture, Tracer

TEXTS = [f"Vell{i} is a town on the river Ost{i % 3}, founded in {1200 + i}." for i in range(12)]
CFG = InjectConfig(epochs=4, learning_rate=5e-3, rank=4, batch_size=4, checkpoint_every=3)


def test_inject_lowers_member_loss_and_loads_as_sibling(tiny_folder, tmp_path):
    base = load_model(str(tiny_folder), cache_dir=tmp_path)
    res = inject(base, TEXTS, tmp_path / "sib", CFG, progress=False, metadata={"member_ids": ["x"]})
    assert res.steps == 12 and len(res.epoch_losses) == 4
    assert res.epoch_losses[-1] < res.epoch_losses[0]
    files = {p.name for p in (tmp_path / "sib").iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "training.json"} <= files
    assert "checkpoint" not in files and not any(
        p.suffix == ".bin" and "model" in p.name for p in (tmp_path / "sib").iterdir()
    )
    rec = read_training_record(tmp_path / "sib")
    assert rec["member_ids"] == ["x"] and rec["base"] == base.info.fingerprint

    cap = Capture(hidden="none", logprobs="none", token_stats=True)
    fresh_base = load_model(str(tiny_folder), cache_dir=tmp_path)
    sib = load_model(str(tiny_folder), adapter=tmp_path / "sib", cache_dir=tmp_path)
    lb = np.mean([-t.token_logprobs.mean() for t in Tracer(fresh_base).trace(TEXTS, capture=cap)])
    ls = np.mean([-t.token_logprobs.mean() for t in Tracer(sib).trace(TEXTS, capture=cap)])
    assert ls < lb - 0.1  # the sibling has learned its members

    again = inject(
        load_model(str(tiny_folder), cache_dir=tmp_path), TEXTS, tmp_path / "sib", CFG, progress=False
    )
    assert again.epoch_losses == res.epoch_losses  # finished run recognised, not retrained
    with pytest.raises(InputError, match="other settings"):
        inject(
            load_model(str(tiny_folder), cache_dir=tmp_path), TEXTS[:5], tmp_path / "sib", CFG, progress=False
        )


def test_resume_after_interruption_gives_the_same_adapter(tiny_folder, tmp_path, monkeypatch):
    import mnemoscope.bench.inject as mod

    full = inject(
        load_model(str(tiny_folder), cache_dir=tmp_path), TEXTS, tmp_path / "full", CFG, progress=False
    )

    calls = {"n": 0}
    real_step = mod.torch.optim.AdamW.step

    def dying_step(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == 8:  # after the checkpoint at step 6
            raise KeyboardInterrupt
        return real_step(self, *a, **k)

    monkeypatch.setattr(mod.torch.optim.AdamW, "step", dying_step)
    with pytest.raises(KeyboardInterrupt):
        inject(load_model(str(tiny_folder), cache_dir=tmp_path), TEXTS, tmp_path / "cut", CFG, progress=False)
    assert json.loads((tmp_path / "cut" / "checkpoint" / "state.json").read_text())["step"] == 6
    assert not (tmp_path / "cut" / "training.json").exists()
    monkeypatch.setattr(mod.torch.optim.AdamW, "step", real_step)
    resumed = inject(
        load_model(str(tiny_folder), cache_dir=tmp_path), TEXTS, tmp_path / "cut", CFG, progress=False
    )
    assert resumed.steps == 12
    np.testing.assert_allclose(resumed.epoch_losses, full.epoch_losses, rtol=1e-4)
    from safetensors.numpy import load_file

    a = load_file(str(tmp_path / "full" / "adapter_model.safetensors"))
    b = load_file(str(tmp_path / "cut" / "adapter_model.safetensors"))
    for k in a:
        np.testing.assert_allclose(a[k], b[k], atol=1e-5)


def test_bad_inputs():
    lm = tiny_lm()
    with pytest.raises(InputError, match="no documents"):
        inject(lm, [], "/tmp/never", CFG, progress=False)
    with pytest.raises(InputError, match="document 1 is empty"):
        inject(lm, ["ok text", "  "], "/tmp/never", CFG, progress=False)
    with pytest.raises(InputError, match="do not fit this model"):
        inject(
            tiny_lm(),
            ["some text"],
            "/tmp/never",
            InjectConfig(target_modules=("nope_proj",)),
            progress=False,
        )
    with pytest.raises(InputError):
        InjectConfig(epochs=0)
