#!/usr/bin/env bash
# Installs NVIDIA Dynamo 1.6.1 (CPU-only: its runtime wheel's Rust core links
# only the system C/C++ libraries) into .venv-dynamo, for
# scripts/dynamo_cluster.sh and tests/python/test_dynamo.py.
# ai-dynamo 1.6.1 requires aisimulate==0.13.0 on Python 3.11-3.13, which on
# PyPI is a stub that fetches from another index; neither the frontend nor
# the worker imports it. So both Dynamo wheels are installed with --no-deps
# (sha256-pinned) and their real dependencies are named below, less
# aisimulate and kubernetes (used only by Dynamo's Kubernetes discovery);
# pip then warns that those two "are not installed", which is expected.
# Idempotent (a stamp names what was installed); about 1 minute the first
# time, from PyPI.
#   scripts/setup_dynamo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${AGENTKV_DYNAMO_VENV:-$PWD/.venv-dynamo}
case ${1:-} in
  -h | --help) sed -n '2,/^set /{/^set /d;p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
say() { echo "[setup_dynamo] $*"; }
VER=1.6.1
RUNTIME_SHA=3683cafe88ededdff29c9ae6f651367eac33153487ff84e205082483cd6b3095
DYNAMO_SHA=83f768730104cbbc84029bf436025706632735173933adbb650b99c746517b70
DEPS=("pydantic>=2.10.6,<=2.13.5" "uvloop>=0.21.0" "aiohttp>=3.14.3,<4" "certifi>=2026.10.19" "msgspec>=0.19"
      "prometheus-client>=0.23.1,<1" "pyzmq>=26" "redis>=6.2,<9" "tqdm>=4" "transformers>=4.56"
      "typing-extensions>=4.10" "zstandard>=0.23,<1" "gguf>=0.10" "numpy")
stamp="$VENV/.agentkv-dynamo-$VER"
[ -f "$stamp" ] && exit 0
say "installing ai-dynamo $VER into $VENV"
python3 -m venv "$VENV"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$VENV/bin/pip" download -q --no-deps -d "$tmp" "ai-dynamo==$VER" "ai-dynamo-runtime==$VER"
check() {  # file sha256
  echo "$2  $1" | sha256sum -c --status || { echo "[setup_dynamo] error: sha256 of $(basename "$1") is not $2" >&2; exit 1; }
}
check "$tmp"/ai_dynamo_runtime-$VER-*.whl "$RUNTIME_SHA"
check "$tmp"/ai_dynamo-$VER-*.whl "$DYNAMO_SHA"
"$VENV/bin/pip" install -q --no-deps "$tmp"/ai_dynamo_runtime-$VER-*.whl "$tmp"/ai_dynamo-$VER-*.whl
"$VENV/bin/pip" install -q "${DEPS[@]}"
"$VENV/bin/python" -c "import dynamo.frontend, dynamo.llm, dynamo.common.backend" ||
  { echo "[setup_dynamo] error: Dynamo does not import; see the messages above" >&2; exit 1; }
touch "$stamp"
say "done"
