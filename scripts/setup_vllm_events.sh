#!/usr/bin/env bash
# vLLM's own KV cache event classes (vllm/distributed/kv_events.py), for the
# tests that decode agentkv's events with code agentkv did not write
# (tests/python/test_kv_events.py). Only that file is kept, in
# $AGENTKV_VLLM_EVENTS_DIR (default ~/.cache/agentkv/vllm-VER); the wheel it
# comes from (about 340 MB, from PyPI) is deleted once the file is out.
# Idempotent: nothing is done when the file is there.
#   scripts/setup_vllm_events.sh
set -euo pipefail
cd "$(dirname "$0")/.."

VER=0.33.0
SHA256=82b362a0a7f89318d9127addfce254d537f5078a31aa87beb08493b0953895ee  # of kv_events.py
DIR=${AGENTKV_VLLM_EVENTS_DIR:-$HOME/.cache/agentkv/vllm-$VER}
FILE=vllm/distributed/kv_events.py
case ${1:-} in
  -h | --help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac

if [ -f "$DIR/$FILE" ] && echo "$SHA256  $DIR/$FILE" | sha256sum -c --status; then
  exit 0
fi
echo "[setup_vllm_events] fetching vllm==$VER's wheel for $FILE"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
.venv/bin/pip download -q --disable-pip-version-check --no-deps --only-binary :all: -d "$tmp" "vllm==$VER"
unzip -q -o "$tmp"/vllm-"$VER"-*.whl "$FILE" -d "$tmp/x"
echo "$SHA256  $tmp/x/$FILE" | sha256sum -c --status || {
  echo "[setup_vllm_events] error: sha256 of $FILE in vllm==$VER does not match $SHA256" >&2; exit 1; }
mkdir -p "$DIR/$(dirname "$FILE")"
mv "$tmp/x/$FILE" "$DIR/$FILE"
