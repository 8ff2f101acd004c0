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

// The worst error of got against ref, each element relative to
// max(|ref[i]|, rms(ref)): float rounding of a long sum is relative to the
// size of its terms, so an element that cancels to near zero is judged
// against the typical magnitude. NaN counts as infinite. *at: its index.
inline double worst_rel_error(const std::vector<float>& got, const std::vector<double>& ref,
                              size_t* at = nullptr) {
  double ss = 0;
  for (double r : ref) ss += r * r;
  const double floor = std::max(1e-30, std::sqrt(ss / std::max<size_t>(1, ref.size())));
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < got.size() && i < ref.size(); ++i) {
    double err = std::fabs(double(got[i]) - ref[i]) / std::max(std::fabs(ref[i]), floor);
    if (!(err <= worst)) {  // also catches NaN
      worst = std::isnan(err) ? INFINITY : err;
      worst_i = i;
    }
  }
  if (at) *at = worst_i;
  return worst;
}

// Every element within rtol of the reference, as worst_rel_error measures.
inline ::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<double>& ref,
                                            double rtol) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << ref.size();
  size_t i = 0;
  const double worst = worst_rel_error(got, ref, &i);
  if (worst <= rtol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << " want " << ref[i]
                                       << " (relative error " << worst << " > " << rtol << ")";
}

}  // namespace agentkv::test
