#!/usr/bin/env bash
# Services the full test suite uses beyond Python: PostgreSQL (the audit log's optional
# backend) and Chromium (the dashboard's browser test), from Debian packages; Arize Phoenix
# (the tracing integration's end-to-end test) in its own virtualenv.
# Idempotent. Prints the export lines for MNEMOSCOPE_TEST_PG_URL and MNEMOSCOPE_PHOENIX; source-safe:
#   eval "$(bash scripts/ci_services.sh)"
set -euo pipefail
log() { echo "[ci_services] $*" >&2; }
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
need=()
command -v pg_ctlcluster >/dev/null 2>&1 || need+=(postgresql)
[ -x /usr/bin/chromium ] || need+=(chromium)
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
# llama.cpp's OpenAI-compatible server (the endpoint backend's and the proxy's real-server tests,
# docs/endpoint.md): llama-cpp-python compiles llama.cpp from source with the machine's gcc/cmake.
# GGML_NATIVE=OFF keeps the wheel portable (pip caches it; a cached -march=native wheel could crash
# on another CPU). Measured on a 2-core machine: 450 s the first time, seconds from pip's cache.
LLAMA_CPP_PYTHON="llama-cpp-python[server]==0.3.36"
if ! "${PYTHON:-python3}" -c "import llama_cpp.server" >/dev/null 2>&1; then
  log "building $LLAMA_CPP_PYTHON (compiles llama.cpp; ~8 min on 2 cores the first time)"
  start=$(date +%s)
  CMAKE_ARGS="-DGGML_NATIVE=OFF" CMAKE_BUILD_PARALLEL_LEVEL=2 MAKEFLAGS=-j2 \
    "${PYTHON:-python3}" -m pip install --disable-pip-version-check -q "$LLAMA_CPP_PYTHON" >&2
  log "llama-cpp-python installed in $(( $(date +%s) - start )) s"
fi
# llama.cpp's own C++ llama-server (the endpoint backend's `native` path, docs/endpoint.md), built
# from the llama.cpp sources llama-cpp-python $LLAMA_CPP_VERSION vendors (its sdist, from pip's cache),
# target llama-server only, GGML_NATIVE=OFF, static; cached as
# ~/.cache/mnemoscope/llama-server/<version>/bin/llama-server (a second run does nothing).
# Measured on the shared 2-core machine (gcc 12, ninja, -j2): 2886 s the first time, under load 15-24
# from other jobs (a second identical build ran alongside for 40 min of it); 211 build steps, whose
# compile time is 78 % ggml + llama + common + mtmd (objects llama-cpp-python's own wheel build
# compiles too, but its CMake project cannot add the server target: see docs/endpoint.md) and 22 %
# the server itself (benchmarks/results/endpoint/cost-llama-server-build.json). 0 s when cached.
LLAMA_CPP_VERSION="${LLAMA_CPP_PYTHON##*==}"
LLAMA_SERVER_DIR="${MNEMOSCOPE_LLAMA_SERVER_DIR:-$HOME/.cache/mnemoscope/llama-server/$LLAMA_CPP_VERSION}"
if [ ! -x "$LLAMA_SERVER_DIR/bin/llama-server" ]; then
  log "building llama-server from llama-cpp-python $LLAMA_CPP_VERSION's vendored llama.cpp"
  start=$(date +%s)
  work="$(mktemp -d)"
  "${PYTHON:-python3}" -m pip download --disable-pip-version-check -q --no-deps --no-binary llama-cpp-python \
    "llama-cpp-python==$LLAMA_CPP_VERSION" -d "$work" >&2
  tar xzf "$work"/llama_cpp_python-"$LLAMA_CPP_VERSION".tar.gz -C "$work"
  src="$work/llama_cpp_python-$LLAMA_CPP_VERSION/vendor/llama.cpp"
  cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >&2
  cmake --build "$work/build" --target llama-server -j "${LLAMA_SERVER_JOBS:-2}" >&2
  install -D -m 755 "$work/build/bin/llama-server" "$LLAMA_SERVER_DIR/bin/llama-server"
  rm -rf "$work"
  log "llama-server built in $(( $(date +%s) - start )) s"
fi
log "PostgreSQL $VER on port $PORT, Chromium $(/usr/bin/chromium --version 2>/dev/null | head -1), Phoenix $PHOENIX_VERSION in $PHOENIX_VENV"
echo "export MNEMOSCOPE_TEST_PG_URL=postgresql://mnemoscope:mnemoscope@127.0.0.1:$PORT/mnemoscope_test"
echo "export MNEMOSCOPE_PHOENIX=$PHOENIX_VENV/bin/phoenix"
echo "export MNEMOSCOPE_LLAMA_SERVER=$LLAMA_SERVER_DIR/bin/llama-server"
