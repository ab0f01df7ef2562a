#!/usr/bin/env bash
# The README's test command: set-up (idempotent), lint, type check, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
bash scripts/setup.sh
"$PY" -m ruff check src tests benchmarks
"$PY" -m ruff format --check src tests benchmarks
"$PY" -m mypy
"$PY" -m pytest -q --durations=25 "$@"
