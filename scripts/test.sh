#!/usr/bin/env bash
# Runs the whole test suite, building what it tests first so it never runs
# stale binaries:
#   1. release build (build/) and its ctest: unit, backend-op and e2e tests on
#      the real model (labels: unit, backend, e2e); the library installed and
#      examples/embed.cpp built against it and run (scripts/check_embed.sh);
#   2. the exactness suite on each other q8 ISA, synthetic K-quant models and
#      Gemma 3 270M; the Python reference and server checks (tests/python),
#      with Qwen2.5-Coder-0.5B and Gemma 3 270M installed for those that need
#      a real chat template or architecture;
#   3. the unit suite under ASan+UBSan (build-asan/);
#   4. each libFuzzer target for AGENTKV_FUZZ_SECONDS (default 30) seconds.
# Each stage prints its duration. Under CI=true a missing model, binary or
# package fails the tests that need it instead of skipping them.
#   AGENTKV_QUICK=1 scripts/test.sh   stages 1 and 2 only
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache (scripts/setup.sh installs it; the CMake presets use it): keyed on
# paths relative to the checkout, so a fresh clone reuses earlier objects.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1

t_all=$SECONDS
t_stage=$SECONDS
stage() { echo "== $*"; t_stage=$SECONDS; }
done_stage() { echo "   ($1: $((SECONDS - t_stage)) s)"; }

# ctest_checked DIR [ctest args...]: ctest, and under CI=true no skipped test.
# A test skips itself only when the model is absent, which CI=true turns into
# a failure (AGENTKV_REQUIRE); any other skip is a fixture that failed in
# SetUpTestSuite, which gtest reports as skipped tests and ctest as passed.
ctest_checked() {
  local dir=$1
  shift
  ctest --test-dir "$dir" --output-on-failure "$@" | tee "$dir/ctest.log"
  if [ "${CI:-}" = true ] && grep -q '\*\*\*Skipped' "$dir/ctest.log"; then
    echo "skipped tests under CI=true (a failed SetUpTestSuite?):"
    grep '\*\*\*Skipped' "$dir/ctest.log"
    exit 1
  fi
}

build_tree() {  # build_tree DIR PRESET [targets...]
  local dir=$1 preset=$2
  shift 2
  # A tree an older checkout configured with Unix Makefiles (the presets
  # now generate Ninja files) is configured afresh.
  if [ -f "$dir/CMakeCache.txt" ] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$dir/CMakeCache.txt"; then
    rm -rf "$dir"
  fi
  mkdir -p "$dir"
  [ -f "$dir/CMakeCache.txt" ] || cmake --preset "$preset" >"$dir/configure.log" 2>&1 \
    || { tail -40 "$dir/configure.log"; exit 1; }
  local tgt=()
  (($#)) && tgt=(--target "$@")
  cmake --build "$dir" -j2 "${tgt[@]}" >"$dir/build.log" 2>&1 || { tail -40 "$dir/build.log"; exit 1; }
}

stage "release: build"
build_tree build release
done_stage "release build"

stage "release: ctest"
ctest_checked build -j2
done_stage "release ctest"

stage "release: the installed library and examples/embed.cpp linked against it"
scripts/check_embed.sh build
done_stage "embed example"

# Issue 31: the ctest above ran the q8 kernels of the best ISA this CPU has
# (auto). The exactness tests run once more on each other one it has
# (scalar aside: too slow for them, and the backend tests and
# tests/python/test_isa.py check its bits), so that a request equals its
# run alone on every kernel. An ISA counts as present when `--isa` takes it.
# auto never takes amx (opt-in: no faster than avx512 where measured) nor
# amx-emulated (the AMX kernel on software tiles, any AVX-512 CPU): both
# run here where the CPU has them.
stage "release: exactness tests on each other q8 ISA"
isas=()
for isa in avx2 avxvnni avx512; do
  build/agentkv logits --isa "$isa" --tokens 1 --out /dev/null >/dev/null 2>&1 && isas+=("$isa")
done
others=()
((${#isas[@]} > 1)) && others=("${isas[@]:0:${#isas[@]}-1}")
# amx-emulated is the AMX kernel with its tile instructions done in
# software: where the CPU runs the real ones, the amx run is that kernel's
# exactness proof (the emulation's bits are MatmulQ8Isa's, in the ctest
# above), so it runs only where amx does not.
if build/agentkv logits --isa amx --tokens 1 --out /dev/null >/dev/null 2>&1; then
  others+=(amx)
elif build/agentkv logits --isa amx-emulated --tokens 1 --out /dev/null >/dev/null 2>&1; then
  others+=(amx-emulated)
fi
for isa in "${others[@]}"; do
  echo "AGENTKV_ISA=$isa"
  AGENTKV_ISA=$isa build/tests/test_e2e --gtest_brief=1 \
    --gtest_filter='ServingExact.*:SharingExact.*:AdapterExact.*' \
    || { echo "exactness tests failed on --isa $isa"; exit 1; }
done
# The K types (issue 31), on the ISA auto takes: synthetic models of
# SmolLM2's shape written as q4_K and as q6_K. Rows of 576 are not a
# multiple of 256, so, as llama-quantize does for a Q4_K_M file, most
# matrices fall back (to q5_0, and to q8_0) and ffn_down keeps the K type.
for t in q4_K q6_K; do
  synth=build/synth-smollm2-$t.gguf
  build/agentkv synth-model -o "$synth" --preset smollm2-135m --type "$t" --seed 1 \
    --vocab-from models/SmolLM2-135M-Instruct.Q4_1.gguf >/dev/null || exit 1
  echo "AGENTKV_MODEL=$synth"
  AGENTKV_MODEL=$synth build/tests/test_e2e --gtest_brief=1 \
    --gtest_filter='ServingExact.*:SharingExact.*:AdapterExact.*' \
    || { echo "exactness tests failed on the synthetic $t model"; exit 1; }
done
# Gemma 3 (issue 51): sliding-window layers with their own RoPE base, post
# norms, GeGLU, one kv head of 256 dims; the real 270M file (253 MB, fetched
# once per machine, scripts/get_model.sh). The suite includes prompts past
# its 512-key window with a shared prefix. With it the LRAgent and DroidSpeak
# suite (Lragent.*: shared-A LR caches, redo layers, snapshots; 14 s), so
# that the shared-K/V schemes' mechanics run on a second model too, and
# relay's exact limit and rotated layer-0 keys (segment copies with RoPE
# deltas, captures; 10 s).
scripts/get_model.sh gemma3-270m
echo "AGENTKV_MODEL=models/gemma-3-270m-q4_k_m.gguf"
AGENTKV_MODEL=models/gemma-3-270m-q4_k_m.gguf build/tests/test_e2e --gtest_brief=1 \
  --gtest_filter='ServingExact.*:SharingExact.*:AdapterExact.*:Lragent.*:Relay.ExactLimitEqualsFullPrefill:Relay.RotatedLayerZero*' \
  || { echo "exactness tests failed on Gemma 3 270M"; exit 1; }
done_stage "exactness on ${isas[*]:-no SIMD ISA}${others[*]:+ (others: ${others[*]})}, on synthetic q4_K/q6_K models and on Gemma 3 270M"

if [ -d tests/python ] && ls tests/python/test_*.py >/dev/null 2>&1; then
  stage "python reference checks"
  # The test tools in .venv (numpy, gguf, pytest, ...): scripts/setup.sh
  # installs only the quick start's OpenAI SDK (a no-op once installed).
  scripts/setup_python.sh test
  # vLLM's KV event classes, which only test_kv_events.py reads: fetched
  # here, not by scripts/setup.sh before the demo (a no-op once cached).
  scripts/setup_vllm_events.sh
  # NVIDIA Dynamo 1.6.1 in .venv-dynamo, for test_dynamo.py (about 1 minute
  # the first time; a no-op once installed).
  scripts/setup_dynamo.sh
  # The smallest real models beyond SmolLM2, for the chat-template and
  # tool-call tests on Qwen2.5 and the Gemma 3 logits tests (issue 51): 491
  # and 253 MB, fetched once per machine and then copied from
  # ~/.cache/agentkv/models (scripts/get_model.sh).
  scripts/get_model.sh qwen2.5-coder-0.5b gemma3-270m  # (gemma: already there from the exactness stage)
  # Two workers (pytest-xdist), a test file each at a time: a file's
  # servers and fixtures stay in one process, and the files that bind fixed
  # ports (test_cluster, test_dynamo) never share them. 529 s against 707 s
  # serially (2 vCPUs, 2026-12-03, issue 56).
  .venv/bin/python -m pytest -q -n "${AGENTKV_PYTEST_JOBS:-2}" --dist loadfile tests/python
  done_stage "python checks"
fi

if [ -z "${AGENTKV_QUICK:-}" ]; then
  stage "asan+ubsan: build the test binaries"
  # Only the test binaries: the CLI and the benches add build time, not checks.
  mapfile -t asan_targets < <(sed -n 's/^agentkv_test(\([a-z0-9_]*\).*/\1/p' tests/CMakeLists.txt)
  build_tree build-asan asan "${asan_targets[@]}"
  done_stage "asan build"

  stage "asan+ubsan: unit suite"
  # The real-model exactness sweeps, and the real-model tests that repeat a
  # path another one here covers (measured under ASan on a fresh clone,
  # 2026-11-24: Reuse.DocumentFoundAtAnyOffset 307 s, Reuse.SchemesRunAndReport
  # 60 s, Relay.InfluenceIsCaptured 65 s, Relay.RotatedLayerZero 38 s), and
  # FidelityBench (bench-fidelity's workflow tasks: 20 s in release, the
  # engine paths of Reuse.GeneratedTokensOfAnEarlierRequestAreFound) and
  # Reuse.SelectionIsOnceOverAChunkedPrompt (497 s under ASan beside a
  # benchmark, 2026-11-26; its Small variant runs here), take minutes under
  # ASan; they ran in the release stage. The runner's own tests
  # on small models, and one real-model test of each engine path (segment
  # copies, eviction, relay captures and resumes, chains), run here; of the
  # shared-K/V schemes, SecondAgentReusesWhatItsSchemeShares (every scheme's
  # rows, the LR cache's own pool, DroidSpeak's snapshots) and the bad requests.
  # Of the composed schemes, all but the defaults sweep (Compose.AtItsDefaults:
  # 6 s in release, the paths of the other Compose tests).
  # ServingExact.LongSharedPrefixPastASlidingWindow (511 s under ASan,
  # 2026-12-03) is Gemma 3's sliding-window sweep; on SmolLM2 it repeats the
  # chunked prefill over a cached prefix that PreemptionUnderATinyPool runs
  # here, and attention past one 512-key chunk is the backend's
  # AttentionInvariance.RowAloneOrInChunks/1100.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest_checked build-asan -j2 \
      -E 'ServingExact\.(Fifty|EachRequest|LongSharedPrefix)|SharingExact\.|Reuse\.(ExactLimits|DocumentFound|SchemesRun|SelectionIsOnceOverAChunkedPrompt$)|Relay\.(ExactLimit|Influence|Rotated)|Lragent\.(OneAgent|ExactLimits)|FidelityBench\.|Compose\.AtItsDefaults'
  done_stage "asan ctest"

  if [ -f fuzz/CMakeLists.txt ]; then
    stage "fuzz targets"
    scripts/fuzz.sh "${AGENTKV_FUZZ_SECONDS:-30}"
    done_stage "fuzz"
  fi
fi
echo "== all stages passed in $((SECONDS - t_all)) s"
