#!/usr/bin/env bash
# The embeddable library as a user gets it: installs build/'s agentkv::engine
# into a prefix, builds examples/embed.cpp against the installed package (not
# this source tree), makes two aLoRA adapters and runs the example, which
# exits 0 only when both adapters read the base's cache and answer the same
# tokens as without sharing. scripts/test.sh runs it after the release build.
#   scripts/check_embed.sh [BUILD_DIR=build] [MODEL]
set -euo pipefail
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/.."
build=${1:-build}
model=${2:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
prefix=$PWD/$build/install
out=$PWD/$build/embed
cmake --build "$build" -j2 --target agentkv_engine agentkv >"$build/engine_build.log" 2>&1 || { tail -40 "$build/engine_build.log"; exit 1; }
rm -rf "$prefix"
cmake --install "$build" --prefix "$prefix" >"$build/install.log"
[ -f "$out/CMakeCache.txt" ] || cmake -S examples -B "$out" -DCMAKE_PREFIX_PATH="$prefix" >"$out.configure.log" 2>&1 \
  || { cat "$out.configure.log"; exit 1; }
cmake --build "$out" -j2 >"$out.build.log" 2>&1 || { tail -40 "$out.build.log"; exit 1; }
for a in 1 2; do
  [ -f "$out/adapter-$a/adapter_config.json" ] || "$build/agentkv" synth-adapter -m "$model" -o "$out/adapter-$a" \
    --rank 8 --seed "$a" --alora-invocation " Answer:" >/dev/null
done
"$out/embed" "$model" "$out/adapter-1" "$out/adapter-2"
