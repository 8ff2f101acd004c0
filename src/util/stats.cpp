#include "util/stats.h"

#include <algorithm>
#include <cmath>

namespace agentkv {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

namespace {

// log(sum(exp(x))) of a row, in double.
double log_sum_exp(const float* x, int64_t n) {
  const double m = *std::max_element(x, x + n);
  double z = 0;
  for (int64_t i = 0; i < n; ++i) z += std::exp(double{x[i]} - m);
  return m + std::log(z);
}

}  // namespace

double kl_divergence(const float* p_logits, const float* q_logits, int64_t n) {
  if (n <= 0) return 0;
  const double lzp = log_sum_exp(p_logits, n), lzq = log_sum_exp(q_logits, n);
  double kl = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double lp = double{p_logits[i]} - lzp;
    kl += std::exp(lp) * (lp - (double{q_logits[i]} - lzq));
  }
  return std::max(0.0, kl);
}

}  // namespace agentkv
