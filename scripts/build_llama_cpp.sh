#!/usr/bin/env bash
# llama.cpp built ONCE for both of its servers the tests use (docs/endpoint.md, "Install"):
#   * llama.cpp's C++ `llama-server` (the endpoint backend's `native` path), and
#   * llama-cpp-python[server] (`python -m llama_cpp.server`, the `grammar`/`positions` paths),
# both from the llama.cpp sources llama-cpp-python $VERSION vendors (vendor/llama.cpp in its sdist),
# so the Python bindings and the C++ server run the same llama.cpp.
#
# One CMake/Ninja build of vendor/llama.cpp, shared libraries (BUILD_SHARED_LIBS=ON), GGML_NATIVE=OFF
# (portable: no -march=native), Release, targets llama-server, llama, ggml and mtmd, installed into
# the cache directory $MNEMOSCOPE_LLAMA_SERVER_DIR (default ~/.cache/mnemoscope/llama-server/$VERSION):
#   bin/llama-server   RUNPATH $ORIGIN/../lib, so it finds lib/ wherever the directory lives
#   lib/lib*.so*       libllama, libggml, libggml-base, libggml-cpu, libmtmd, libllama-common,
#                      libllama-server-impl (RUNPATH $ORIGIN: each finds the others beside it)
#   wheel/llama_cpp_python-$VERSION-py3-none-linux_x86_64.whl
#                      llama-cpp-python's own Python code with those same libraries in llama_cpp/lib/,
#                      where llama_cpp loads them from (llama_cpp/llama_cpp.py, _ctypes_extensions.py);
#                      built from the sdist with -DLLAMA_BUILD=OFF (its CMakeLists.txt option: compile
#                      nothing) after copying the libraries into the package, so pip records them and
#                      `pip uninstall` removes them. It is built from a local directory with
#                      --no-cache-dir: it never enters pip's wheel cache, where a later plain
#                      `pip install llama-cpp-python==$VERSION` elsewhere could pick it up.
#   build.txt          the configure flags; written last, so a cache without it (an interrupted build,
#                      or the static llama-server-only build of earlier versions of this script) or
#                      with other flags is rebuilt.
# Then `${PYTHON:-python3}` gets that wheel (with the [server] extra's dependencies) unless its
# llama_cpp already imports (with llama_cpp.mtmd_cpp and llama_cpp.server.app) from exactly these
# libraries (compared byte for byte); an install made otherwise (e.g. compiled by pip from the sdist,
# as this script used to) is replaced with `pip install --force-reinstall --no-deps`.
#
# Idempotent: a second run checks `llama-server --version` and the Python import, and does nothing.
# Needs gcc/g++, cmake >= 3.21 and ninja (scripts/ci_services.sh installs them from Debian).
# Prints `export MNEMOSCOPE_LLAMA_SERVER=...` on stdout; logs go to stderr:
#   eval "$(bash scripts/build_llama_cpp.sh)"
set -euo pipefail
log() { echo "[build_llama_cpp] $*" >&2; }
PY="${PYTHON:-python3}"
VERSION="0.3.36"   # llama-cpp-python's version; llama.cpp's is whatever its sdist vendors
DIR="${MNEMOSCOPE_LLAMA_SERVER_DIR:-$HOME/.cache/mnemoscope/llama-server/$VERSION}"
JOBS="${LLAMA_SERVER_JOBS:-${CMAKE_BUILD_PARALLEL_LEVEL:-2}}"
PY_LIBS=(llama ggml ggml-base ggml-cpu mtmd)   # what llama_cpp loads, and what those need
CMAKE_FLAGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=ON
  "-DCMAKE_INSTALL_RPATH=\$ORIGIN/../lib;\$ORIGIN" -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON
  -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF
  -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF)
TARGETS=(llama-server llama ggml mtmd)
STAMP="llama-cpp-python $VERSION vendor/llama.cpp; cmake ${CMAKE_FLAGS[*]}; targets ${TARGETS[*]}"

wheel_of() { compgen -G "$1/wheel/llama_cpp_python-$VERSION-*.whl" | head -1; }

cache_ok() {  # the build is complete, made with these flags, and the server runs
  [ "$(head -1 "$DIR/build.txt" 2>/dev/null)" = "$STAMP" ] && [ -n "$(wheel_of "$DIR")" ] &&
    "$DIR/bin/llama-server" --version >/dev/null 2>&1
}

python_ok() {  # llama_cpp (and its server) imports, at this version, from the cached libraries
  local pkg lib
  pkg="$("$PY" -c "import os, llama_cpp, llama_cpp.mtmd_cpp, llama_cpp.server.app
assert llama_cpp.__version__ == '$VERSION', llama_cpp.__version__
print(os.path.dirname(llama_cpp.__file__))" 2>/dev/null)" || return 1
  for lib in "${PY_LIBS[@]}"; do
    cmp -s "$pkg/lib/lib$lib.so" "$DIR/lib/lib$lib.so" || return 1
  done
}

build() {
  local start work src build new lib soname steps
  for tool in cmake ninja c++ readelf; do
    command -v "$tool" >/dev/null || { log "needs $tool (gcc/g++, cmake, ninja-build, binutils)"; exit 1; }
  done
  log "building llama.cpp from llama-cpp-python $VERSION's vendored sources: llama-server + shared libraries, once"
  start=$(date +%s)
  work="$(mktemp -d)"
  new="$DIR.new.$$"
  # shellcheck disable=SC2064  # expand now: the paths are fixed
  trap "rm -rf '$work' '$new'" EXIT
  "$PY" -m pip download --disable-pip-version-check -q --no-deps --no-binary llama-cpp-python \
    "llama-cpp-python==$VERSION" -d "$work" >&2
  tar xzf "$work/llama_cpp_python-$VERSION.tar.gz" -C "$work"
  src="$work/llama_cpp_python-$VERSION"
  build="$work/build"
  cmake -S "$src/vendor/llama.cpp" -B "$build" "${CMAKE_FLAGS[@]}" >&2
  cmake --build "$build" --target "${TARGETS[@]}" -j "$JOBS" >&2
  # ninja's log has a line per output (a shared library's SONAME symlinks too): one step per command
  steps=$(awk '!/^#/ {print $5}' "$build/.ninja_log" | sort -u | wc -l)

  mkdir -p "$new/bin" "$new/lib" "$new/wheel"
  install -m 755 "$build/bin/llama-server" "$new/bin/llama-server"
  cp -P "$build"/bin/lib*.so* "$new/lib/"   # the libraries with their SONAME symlinks
  if ldd "$new/bin/llama-server" | grep -q "not found"; then
    ldd "$new/bin/llama-server" >&2
    log "llama-server misses a library"; exit 1
  fi
  "$new/bin/llama-server" --version >&2

  # llama-cpp-python's wheel, with the same libraries: llama_cpp loads lib<name>.so from
  # llama_cpp/lib, and those need each other by SONAME (lib<name>.so.0); a wheel holds no symlinks,
  # so both names are copies. Its .gitignore ignores lib/, which scikit-build-core honours when it
  # collects the package's files: it goes.
  mkdir -p "$src/llama_cpp/lib"
  for lib in "${PY_LIBS[@]}"; do
    cp -L "$new/lib/lib$lib.so" "$src/llama_cpp/lib/"
    soname="$(readelf -d "$new/lib/lib$lib.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')"
    if [ -n "$soname" ] && [ "$soname" != "lib$lib.so" ]; then cp -L "$new/lib/$soname" "$src/llama_cpp/lib/"; fi
  done
  rm -f "$src/.gitignore"
  CMAKE_ARGS="-DLLAMA_BUILD=OFF" "$PY" -m pip wheel --disable-pip-version-check -q --no-deps \
    --no-cache-dir -w "$new/wheel" "$src" >&2

  echo "$STAMP" > "$new/build.txt"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $(( $(date +%s) - start )) s, $steps ninja steps, -j $JOBS" >> "$new/build.txt"
  rm -rf "$DIR"
  mkdir -p "$(dirname "$DIR")"
  mv "$new" "$DIR"
  rm -rf "$work"
  trap - EXIT
  log "llama.cpp built in $(( $(date +%s) - start )) s ($steps ninja steps, -j $JOBS) into $DIR"
}

install_python() {
  local whl start
  start=$(date +%s)
  whl="$(wheel_of "$DIR")"
  log "installing $(basename "$whl") (llama.cpp from $DIR/lib, nothing compiled) for $PY"
  # The [server] extra's dependencies first, then the wheel itself over whatever llama-cpp-python
  # was there (pip would keep an installed 0.3.36 built otherwise).
  "$PY" -m pip install --disable-pip-version-check -q "${whl}[server]" >&2
  "$PY" -m pip install --disable-pip-version-check -q --force-reinstall --no-deps "$whl" >&2
  if ! python_ok; then
    "$PY" -c "import llama_cpp, llama_cpp.mtmd_cpp, llama_cpp.server.app; print(llama_cpp.__file__)" >&2 || true
    log "llama_cpp does not import from $DIR/lib's libraries after installing the wheel"; exit 1
  fi
  log "llama-cpp-python installed in $(( $(date +%s) - start )) s"
}

if cache_ok; then
  log "llama.cpp cached in $DIR ($(sed -n 2p "$DIR/build.txt"))"
else
  build
fi
if python_ok; then
  log "llama_cpp $VERSION imports from $DIR/lib's libraries"
else
  install_python
fi
echo "export MNEMOSCOPE_LLAMA_SERVER=$DIR/bin/llama-server"
