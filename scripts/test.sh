#!/usr/bin/env bash
# Runs the whole test suite: the release build's ctest (unit, backend, e2e on the
# real model), the Python reference checks, the unit suite under ASan+UBSan,
# and the fuzz targets.
#   AGENTKV_QUICK=1 scripts/test.sh   release ctest and Python checks only
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== release: ctest"
ctest --test-dir build --output-on-failure -j2

if [ -d tests/python ] && ls tests/python/test_*.py >/dev/null 2>&1; then
  echo "== python reference checks"
  .venv/bin/python -m pytest -q tests/python
fi

if [ -z "${AGENTKV_QUICK:-}" ]; then
  echo "== asan+ubsan: unit suite"
  [ -f build-asan/CMakeCache.txt ] || cmake --preset asan >/dev/null
  # Only the test binaries: the CLI and the benches add build time, not checks.
  asan_targets=$(sed -n 's/^agentkv_test(\([a-z0-9_]*\).*/\1/p' tests/CMakeLists.txt)
  cmake --build build-asan -j2 --target $asan_targets >build-asan/build.log 2>&1 \
    || { tail -40 build-asan/build.log; exit 1; }
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j2 -LE slow \
    -E 'ServingExact\.(Fifty|EachRequest)|SharingExact\.'  # the real-model exactness sweeps (minutes under ASan); the runner's adapter tests on the tiny model run here

  if [ -f fuzz/CMakeLists.txt ]; then
    echo "== fuzz targets"
    scripts/fuzz.sh "${AGENTKV_FUZZ_SECONDS:-60}"
  fi
fi
