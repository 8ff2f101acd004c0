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
mkdir -p build-fuzz
# Always (re)configure: a fuzz_*.cpp added since the last configure is a new target.
cmake --preset fuzz >build-fuzz/build.log 2>&1 || { tail -40 build-fuzz/build.log; exit 1; }
cmake --build build-fuzz -j2 --target "${targets[@]}" >>build-fuzz/build.log 2>&1 || { tail -40 build-fuzz/build.log; exit 1; }

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
status=0
for t in "${targets[@]}"; do
  bin="build-fuzz/fuzz/$t"
  corpus="fuzz-corpus/$t"
  seeds="fuzz-corpus/$t-seeds"
  log="fuzz-corpus/$t.log"
  mkdir -p "$corpus" "$seeds"
  AGENTKV_FUZZ_WRITE_SEEDS="$seeds" "$bin" -runs=0 "$seeds" >/dev/null 2>&1 || true
  echo "== $t: ${secs}s"
  if "$bin" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
      -artifact_prefix="fuzz-corpus/$t-" "$corpus" "$seeds" >"$log" 2>&1; then
    grep -E "^Done [0-9]+ runs" "$log" || tail -3 "$log"
  else
    echo "FAILED: $t (log: $log)"
    grep -E "ERROR|SUMMARY|invariant|runtime error" "$log" | head -20 || true
    tail -20 "$log"
    status=1
  fi
done
exit $status
