#!/usr/bin/env bash
# Installs the llama.cpp peer used by scripts/bench_llamacpp.py into .venv-bench
# (a separate, git-ignored venv: the engine and its tests never use it).
# llama-cpp-python compiles llama.cpp from its sdist on install, so this is slow
# on a small machine (tens of minutes on 2 cores). Idempotent.
#   scripts/setup_bench.sh
#   LLAMA_CPP_PYTHON_VERSION=0.3.16 scripts/setup_bench.sh   pin another version
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv-bench
PKG="llama-cpp-python${LLAMA_CPP_PYTHON_VERSION:+==$LLAMA_CPP_PYTHON_VERSION}"
PY=${PYTHON:-python3}

say() { echo "[setup_bench] $*"; }

if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV"
  "$PY" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import matplotlib" 2>/dev/null; then
  say "installing matplotlib (plots in docs/benchmarks.md)"
  "$VENV/bin/pip" install -q --disable-pip-version-check matplotlib
fi
if "$VENV/bin/python" -c "import llama_cpp, numpy" 2>/dev/null; then
  say "llama_cpp $("$VENV/bin/python" -c 'import llama_cpp; print(llama_cpp.__version__)') already installed"
  exit 0
fi

# A CPU-only build for this machine (GGML_NATIVE: the same -march=native our
# engine gets); the multimodal helper library is not needed for the benchmark.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=ON -DGGML_BLAS=OFF -DLLAVA_BUILD=OFF -DMTMD_BUILD=OFF}"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
say "installing $PKG (compiles llama.cpp; CMAKE_ARGS=$CMAKE_ARGS, -j$CMAKE_BUILD_PARALLEL_LEVEL)"
"$VENV/bin/pip" install -q --disable-pip-version-check --no-binary llama-cpp-python numpy "$PKG"
"$VENV/bin/python" -c "import llama_cpp; print('[setup_bench] llama_cpp', llama_cpp.__version__, 'ready')"
