#include "format/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "format/fp16.h"

namespace agentkv {
namespace {

TEST(Quantize, Fp16RoundTripsEveryFiniteHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;  // inf / NaN
    const float f = fp16_to_f32(static_cast<uint16_t>(h));
    ASSERT_EQ(f32_to_fp16(f), h) << std::hex << h;
  }
}

TEST(Quantize, Fp16RoundsToNearestEven) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-70000.0f, 70000.0f);
  for (int i = 0; i < 100000; ++i) {
    const float f = i % 2 ? u(rng) : u(rng) * 1e-6f;
    const uint16_t h = f32_to_fp16(f);
    if (std::fabs(f) > 65519.0f) {
      EXPECT_EQ(h & 0x7fff, 0x7c00);
      continue;
    }
    // No other half is closer; on a tie the even one wins.
    const double got = std::fabs(double(fp16_to_f32(h)) - f);
    for (int d : {-1, 1}) {
      const uint16_t n = static_cast<uint16_t>(h + d);
      if ((n & 0x7c00) == 0x7c00 || ((n ^ h) & 0x8000)) continue;
      const double other = std::fabs(double(fp16_to_f32(n)) - f);
      ASSERT_TRUE(got < other || (got == other && (h & 1) == 0)) << f;
    }
  }
}

TEST(Quantize, Q8_0DequantizesWithinHalfAStep) {
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(256);
  for (auto& x : v) x = nd(rng);
  auto q = quantize_values(GgmlType::kQ8_0, v.data(), 256);
  ASSERT_TRUE(q.is_ok());
  ASSERT_EQ(q->size(), 8u * 34);
  std::vector<float> back(256);
  ASSERT_TRUE(dequantize_row(GgmlType::kQ8_0, q->data(), back.data(), 256).is_ok());
  for (int b = 0; b < 8; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[b * 32 + j]));
    // Half a step from rounding q, plus |q| <= 127 times the f16 rounding of d
    // (relative 2^-11): at most 0.5 d + 0.062 d.
    const float d = amax / 127.0f;
    for (int j = 0; j < 32; ++j) EXPECT_LE(std::fabs(back[b * 32 + j] - v[b * 32 + j]), 0.57f * d);
  }
  EXPECT_FALSE(quantize_values(GgmlType::kQ8_0, v.data(), 33).is_ok());
  EXPECT_EQ(quantize_values(GgmlType::kQ4_K, v.data(), 256).status().code(), ErrorCode::kUnsupported);
}

}  // namespace
}  // namespace agentkv
