// The kernel tiles left uninstrumented under ASan (backend/cpu/asan_check.h)
// still have their buffers checked: a weight matrix one float short is
// reported by ASan as a heap overflow, as an instrumented loop would be.
// Built only under ASan (nothing to check elsewhere), so no run skips it.
#if defined(__SANITIZE_ADDRESS__)
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "backend/cpu/dot_tile.h"

namespace agentkv::cpu {
namespace {

void into_freed_output() {
  std::vector<float> x(64, 1.0f), w(8 * 64, 0.5f);
  float* y = new float[8];
  delete[] y;
  dot_rows_f32(x.data(), 64, w.data(), 64, 64, y, 8, 1, 0, 8, false);
}

void product_over(const float* w) {
  std::vector<float> x(64, 1.0f), y(8, 0.0f);
  dot_rows_f32(x.data(), 64, w, 64, 64, y.data(), 8, 1, 0, 8, false);
}

TEST(AsanTileCheck, AFullWeightMatrixIsNotReported) {
  std::vector<float> w(8 * 64, 0.5f);
  product_over(w.data());
  SUCCEED();
}

TEST(AsanTileCheck, AWeightMatrixOneFloatShortIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(product_over(std::make_unique<float[]>(8 * 64 - 1).get()), "heap-buffer-overflow");
}

TEST(AsanTileCheck, AFreedOutputIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(into_freed_output(), "heap-use-after-free");
}

}  // namespace
}  // namespace agentkv::cpu
#endif
