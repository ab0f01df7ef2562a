#!/usr/bin/env bash
# Time `.ci/run` as on a fresh machine: a new clone of this checkout's HEAD, a new virtualenv and
# a new HOME (an empty pip cache, no ~/.cache/mnemoscope, no Phoenix virtualenv, no llama.cpp
# build). Debian packages already installed (PostgreSQL, Chromium) stay: apt-get cannot be undone
# here. Everything goes under WORK (default /tmp/mnemoscope-fresh), which is removed first.
#   bash benchmarks/fresh_machine_ci.sh [WORK] > fresh.log 2>&1
# Prints the commit, the start and end time with the load, the exit code and the wall seconds.
set -uo pipefail
SRC="$(cd "$(dirname "$0")/.." && pwd)"
WORK="${1:-/tmp/mnemoscope-fresh}"
PY="${PYTHON:-python3}"
rm -rf "$WORK"
mkdir -p "$WORK/home"
git clone -q "$SRC" "$WORK/clone"
"$PY" -m venv "$WORK/venv"
export HOME="$WORK/home"
export PATH="$WORK/venv/bin:$PATH"
unset PYTHONPATH
cd "$WORK/clone" || exit 1
echo "commit $(git rev-parse HEAD)"
echo "start $(date -u +%FT%TZ) $(uptime)"
start=$(date +%s)
bash .ci/run
rc=$?
echo "end $(date -u +%FT%TZ) rc=$rc wall=$(( $(date +%s) - start )) s $(uptime)"
exit $rc
