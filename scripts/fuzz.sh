#!/usr/bin/env bash
# Builds the libFuzzer targets (CMake preset "fuzz": clang, ASan+UBSan, in
# build-fuzz/) and runs each fuzz/fuzz_*.cpp target for SECONDS seconds.
# Fails on any crash, sanitizer report or leak.
#   scripts/fuzz.sh [SECONDS]      (default 60)
# Corpora live in fuzz-corpus/<target>/ (git-ignored) and grow across runs;
# a target that honours AGENTKV_FUZZ_WRITE_SEEDS=<dir> writes its seed files
# there first (fuzz_gguf writes small valid GGUFs made with GgufWriter).
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"

targets=()
for src in fuzz/fuzz_*.cpp; do
  [ -e "$src" ] || continue
  targets+=("$(basename "$src" .cpp)")
done
if [ ${#targets[@]} -eq 0 ]; then
  echo "no fuzz targets"
  exit 0
fi

export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
# A tree an older checkout configured with Unix Makefiles is configured afresh.
if [ -f build-fuzz/CMakeCache.txt ] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' build-fuzz/CMakeCache.txt; then
  rm -rf build-fuzz
fi
mkdir -p build-fuzz
# Always (re)configure: a fuzz_*.cpp added since the last configure is a new target.
cmake --preset fuzz >build-fuzz/build.log 2>&1 || { tail -40 build-fuzz/build.log; exit 1; }
cmake --build build-fuzz -j2 --target "${targets[@]}" >>build-fuzz/build.log 2>&1 || { tail -40 build-fuzz/build.log; exit 1; }

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# Two targets at a time (one per core; each libFuzzer run is one process),
# each for its full SECONDS: the same budget per target in half the time.
jobs=${AGENTKV_FUZZ_JOBS:-2}
run_target() {
  local t=$1 bin="build-fuzz/fuzz/$1" corpus="fuzz-corpus/$1" seeds="fuzz-corpus/$1-seeds" log="fuzz-corpus/$1.log"
  mkdir -p "$corpus" "$seeds"
  AGENTKV_FUZZ_WRITE_SEEDS="$seeds" "$bin" -runs=0 "$seeds" >/dev/null 2>&1 || true
  if "$bin" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
      -artifact_prefix="fuzz-corpus/$t-" "$corpus" "$seeds" >"$log" 2>&1; then
    echo "== $t: ${secs}s: $(grep -E "^Done [0-9]+ runs" "$log" || tail -1 "$log")"
  else
    { echo "FAILED: $t (log: $log)"
      grep -E "ERROR|SUMMARY|invariant|runtime error" "$log" | head -20 || true
      tail -20 "$log"; } >"fuzz-corpus/$t.failed"
    return 1
  fi
}
status=0
pids=()
names=()
for t in "${targets[@]}"; do
  rm -f "fuzz-corpus/$t.failed"
  run_target "$t" &
  pids+=($!)
  names+=("$t")
  if ((${#pids[@]} >= jobs)); then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
for t in "${names[@]}"; do [ -f "fuzz-corpus/$t.failed" ] && cat "fuzz-corpus/$t.failed"; done
exit $status
