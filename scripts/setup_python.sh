#!/usr/bin/env bash
# The Python virtualenv (.venv) and its pinned packages, in two sets:
#   scripts/setup_python.sh demo   the OpenAI SDK of the README's quick start
#                                  (scripts/setup.sh, before the demo's build)
#   scripts/setup_python.sh test   the test suite's and the benchmarks' tools
#                                  (numpy, gguf, pytest, ...; scripts/test.sh)
#   AGENTKV_TRAIN=1 scripts/setup_python.sh test   also JAX in .venv-train
#                                  (tools/lragent/train_roles.py; not in CI)
# The engine itself never imports Python. Idempotent: a stamp of the pins in
# .venv/agentkv-pins; the test set includes the demo one.
set -euo pipefail
cd "$(dirname "$0")/.."
set_name=${1:-test}
DEMO_PKGS=(openai==3.54.0)
# Pinned: the versions the suite was last run with.
TEST_PKGS=(numpy==2.4.6 gguf==0.19.0 tokenizers==0.23.3 openai==3.54.0 pytest==9.2.0 jinja2==3.1.6 jsonschema==4.25.1
  openai-agents==0.24.0 msgspec==0.22.0 pyzmq==27.3.0 pytest-xdist==3.8.0 execnet==2.1.2)
case $set_name in
  demo) pkgs=("${DEMO_PKGS[@]}") ;;
  test) pkgs=("${TEST_PKGS[@]}") ;;
  -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "[setup_python] error: unknown set '$set_name' (demo or test)" >&2; exit 2 ;;
esac
t0=$SECONDS
say() { echo "[setup_python +$((SECONDS - t0))s] $*"; }
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  "$PY" -m venv .venv
fi
stamp=$(cat .venv/agentkv-pins 2>/dev/null || true)
# A venv made with other versions is brought to these; one with the test
# set already has the demo's.
if [ "$stamp" != "${pkgs[*]}" ] && { [ "$set_name" = test ] || [ "$stamp" != "${TEST_PKGS[*]}" ]; }; then
  say "installing the $set_name set: ${pkgs[*]}"
  .venv/bin/pip install -q --disable-pip-version-check "${pkgs[@]}"
  echo "${pkgs[*]}" >.venv/agentkv-pins
  say "done"
fi

if [ -n "${AGENTKV_TRAIN:-}" ] && [ "$(cat .venv-train/agentkv-pins 2>/dev/null)" != "jax==0.10.2 jaxlib==0.10.2 ${TEST_PKGS[*]}" ]; then
  say "installing .venv-train (jax)"
  [ -x .venv-train/bin/python ] || "$PY" -m venv .venv-train
  .venv-train/bin/pip install -q --disable-pip-version-check jax==0.10.2 jaxlib==0.10.2 "${TEST_PKGS[@]}"
  echo "jax==0.10.2 jaxlib==0.10.2 ${TEST_PKGS[*]}" >.venv-train/agentkv-pins
fi
