// AGENTKV_ISA=NAME runs every test of this binary on that instruction set of
// the q8 kernels (`--isa`'s names): scripts/test.sh runs the exactness tests
// once for each ISA the CPU has besides the default, so that a request equals
// its run alone on each (issue 31). Unset or empty: auto. A name this CPU or
// build lacks stops the binary with the reason, before any test runs.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "backend/backend.h"

namespace {

class IsaEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* name = std::getenv("AGENTKV_ISA");
    if (name == nullptr || *name == '\0') return;
    const agentkv::Status st = agentkv::backend_cpu_select_isa(name);
    if (!st.is_ok()) {
      std::fprintf(stderr, "AGENTKV_ISA=%s: %s\n", name, st.message().c_str());
      std::exit(2);
    }
    std::fprintf(stderr, "q8 kernels: %s (AGENTKV_ISA)\n", name);
  }
};

[[maybe_unused]] ::testing::Environment* const kIsaEnvironment =
    ::testing::AddGlobalTestEnvironment(new IsaEnvironment);

}  // namespace
