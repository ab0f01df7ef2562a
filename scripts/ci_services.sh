#!/usr/bin/env bash
# Services the full test suite uses beyond Python: PostgreSQL (the audit log's optional
# backend) and Chromium (the dashboard's browser test), from Debian packages; Arize Phoenix
# (the tracing integration's end-to-end test) in its own virtualenv; llama.cpp (llama-cpp-python's
# server and the C++ llama-server, the endpoint and proxy tests), compiled once.
# Idempotent. Prints the export lines for MNEMOSCOPE_TEST_PG_URL, MNEMOSCOPE_PHOENIX and
# MNEMOSCOPE_LLAMA_SERVER; source-safe:
#   eval "$(bash scripts/ci_services.sh)"
set -euo pipefail
log() { echo "[ci_services] $*" >&2; }
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
need=()
command -v pg_ctlcluster >/dev/null 2>&1 || need+=(postgresql)
[ -x /usr/bin/chromium ] || need+=(chromium)
# compiling llama.cpp (scripts/build_llama_cpp.sh)
command -v c++ >/dev/null 2>&1 || need+=(g++)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v ninja >/dev/null 2>&1 || need+=(ninja-build)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi
VER="$(ls /usr/lib/postgresql | sort -V | tail -1)"
if ! pg_lsclusters -h 2>/dev/null | grep -q "^$VER main"; then
  $SUDO pg_createcluster "$VER" main >&2
fi
if ! pg_lsclusters -h | grep -q "^$VER main .* online"; then
  $SUDO pg_ctlcluster "$VER" main start >&2
fi
PORT="$(pg_lsclusters -h | awk -v v="$VER" '$1==v && $2=="main" {print $3}')"
$SUDO su postgres -c "psql -q -p $PORT -tc \"SELECT 1 FROM pg_roles WHERE rolname='mnemoscope'\" | grep -q 1 || psql -q -p $PORT -c \"CREATE ROLE mnemoscope LOGIN SUPERUSER PASSWORD 'mnemoscope'\"" >&2
$SUDO su postgres -c "psql -q -p $PORT -tc \"SELECT 1 FROM pg_database WHERE datname='mnemoscope_test'\" | grep -q 1 || createdb -p $PORT -O mnemoscope mnemoscope_test" >&2
# Arize Phoenix (the tracing server tests/test_phoenix.py exports audit spans to) lives in its own
# virtualenv: it pins its own fastapi/sqlalchemy/grpcio/... and must not touch the project's
# environment. ~2.5 min and ~850 MB the first time; the test starts and stops the server itself.
PHOENIX_VENV="${MNEMOSCOPE_PHOENIX_VENV:-$HOME/.cache/mnemoscope-phoenix-venv}"
PHOENIX_VERSION="20.26.1"
if ! "$PHOENIX_VENV/bin/python" -c "import sys, phoenix; sys.exit(phoenix.__version__ != '$PHOENIX_VERSION')" >/dev/null 2>&1; then
  log "installing arize-phoenix $PHOENIX_VERSION into $PHOENIX_VENV"
  "${PYTHON:-python3}" -m venv "$PHOENIX_VENV" >&2
  "$PHOENIX_VENV/bin/pip" install -q --disable-pip-version-check "arize-phoenix==$PHOENIX_VERSION" >&2
fi
# llama.cpp, compiled ONCE for both of its servers the tests use (docs/endpoint.md, "Install"):
# llama-cpp-python[server] (`python -m llama_cpp.server`) and llama.cpp's C++ llama-server (the
# endpoint backend's `native` path). scripts/build_llama_cpp.sh builds the llama.cpp sources
# llama-cpp-python 0.3.36 vendors (its sdist) with CMake/Ninja, -j2: shared libraries (libllama,
# libggml*, libmtmd, ...), GGML_NATIVE=OFF (portable), into ~/.cache/mnemoscope/llama-server/0.3.36/
# (bin/llama-server, lib/, and a llama-cpp-python wheel whose llama_cpp/lib/ holds the same
# libraries: built with -DLLAMA_BUILD=OFF, pip compiles nothing), then installs that wheel into
# ${PYTHON:-python3}. Previously pip compiled llama-cpp-python (450-554 s) and a static llama-server
# was compiled after it, 78 % of its objects the same (benchmarks/results/endpoint/
# cost-llama-server-build.json). A second run checks that llama-server runs and that llama_cpp
# imports from exactly the cached libraries, and does nothing (~1 s); a llama-cpp-python that pip
# compiled itself is replaced by the wheel.
LLAMA_EXPORTS="$(bash "$(dirname "$0")/build_llama_cpp.sh")"
log "PostgreSQL $VER on port $PORT, Chromium $(/usr/bin/chromium --version 2>/dev/null | head -1), Phoenix $PHOENIX_VERSION in $PHOENIX_VENV"
echo "export MNEMOSCOPE_TEST_PG_URL=postgresql://mnemoscope:mnemoscope@127.0.0.1:$PORT/mnemoscope_test"
echo "export MNEMOSCOPE_PHOENIX=$PHOENIX_VENV/bin/phoenix"
echo "$LLAMA_EXPORTS"
