// Tests that need the model file (or another artifact of scripts/setup.sh)
// skip when it is absent on a developer's machine, but fail under CI
// (CI=true): there a missing model is a broken set-up, not a reason to pass.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace agentkv::test {

inline bool in_ci() {
  const char* c = std::getenv("CI");
  return c && (std::strcmp(c, "true") == 0 || std::strcmp(c, "1") == 0);
}

}  // namespace agentkv::test

// Skips (or, under CI, fails) the current test when `missing` holds.
#define AGENTKV_REQUIRE(missing, what)                                          \
  do {                                                                          \
    if (missing) {                                                              \
      if (::agentkv::test::in_ci()) GTEST_FAIL() << what << " (required in CI)"; \
      GTEST_SKIP() << what;                                                     \
    }                                                                           \
  } while (0)
