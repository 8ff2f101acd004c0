// Shared helpers for the backend op tests: random inputs and a closeness
// check. The reference implementations themselves live in each test file as
// plain double-precision loops, written from the op's definition.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace agentkv::test {

inline std::vector<float> random_vec(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Every element within rtol of the reference, relative to max(|ref[i]|, rms(ref)):
// float rounding of a long sum is relative to the size of its terms, so an
// element that cancels to near zero is judged against the typical magnitude.
inline ::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<double>& ref,
                                            double rtol) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << ref.size();
  double ss = 0;
  for (double r : ref) ss += r * r;
  const double floor = std::max(1e-30, std::sqrt(ss / std::max<size_t>(1, ref.size())));
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::fabs(double(got[i]) - ref[i]) / std::max(std::fabs(ref[i]), floor);
    if (!(err <= worst)) {  // also catches NaN
      worst = std::isnan(err) ? INFINITY : err;
      worst_i = i;
    }
  }
  if (worst <= rtol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "element " << worst_i << ": got " << got[worst_i] << " want " << ref[worst_i]
         << " (relative error " << worst << " > " << rtol << ")";
}

}  // namespace agentkv::test
