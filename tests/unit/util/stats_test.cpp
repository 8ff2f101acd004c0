// util/stats: the one median and the one KL of the project, against values
// worked by hand.
#include "util/stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace agentkv {
namespace {

TEST(Stats, MedianOddEvenEmpty) {
  EXPECT_EQ(median({3, 1, 2}), 2);
  EXPECT_EQ(median({4, 1, 3, 2}), 2.5);  // the mean of the two middle values
  EXPECT_EQ(median({}), 0);
}

TEST(Stats, KlOfTwoCoins) {
  // p = (1/2, 1/2), q = (1/4, 3/4): KL = 1/2 ln 2 + 1/2 ln(2/3).
  const std::vector<float> p = {0.0f, 0.0f};
  const std::vector<float> q = {0.0f, static_cast<float>(std::log(3.0))};
  const double want = 0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0);
  // |error| <= 1e-7: the one float rounding of ln 3 moves q by about 3e-8.
  EXPECT_NEAR(kl_divergence(p.data(), q.data(), 2), want, 1e-7);
  EXPECT_EQ(kl_divergence(p.data(), p.data(), 2), 0);
  // Logits and their log-softmax give the same KL (shift invariance), up to
  // the double rounding of the shift (one ulp of 5: 9e-16).
  const std::vector<float> shifted = {5.0f, 5.0f};
  EXPECT_NEAR(kl_divergence(shifted.data(), q.data(), 2), kl_divergence(p.data(), q.data(), 2), 1e-14);
}

}  // namespace
}  // namespace agentkv
