#include "backend/cpu/rope_table.h"

#include <algorithm>
#include <cmath>

namespace agentkv::cpu {

bool RopeTable::same_params(const RopeParams& p) const {
  if (p.rot_dim / 2 != half_ || p.freq_base != freq_base_ || p.freq_scale != freq_scale_ ||
      p.attn_factor != attn_factor_)
    return false;
  if ((p.freq_factors == nullptr) != factors_.empty()) return false;
  return !p.freq_factors || std::equal(factors_.begin(), factors_.end(), p.freq_factors);
}

void RopeTable::compute(int64_t pos, float* cos_out, float* sin_out) const {
  // Angles reach thousands of radians at long context; float would lose
  // ~1e-4 of them, so the angle and its cos/sin are computed in double.
  const double scaled = double(pos) * freq_scale_;
  for (int32_t i = 0; i < half_; ++i) {
    double theta = scaled * inv_freq_[i];
    cos_out[i] = float(std::cos(theta) * attn_factor_);
    sin_out[i] = float(std::sin(theta) * attn_factor_);
  }
}

void RopeTable::prepare(const RopeParams& p, int64_t max_pos) {
  if (!same_params(p)) {
    half_ = p.rot_dim / 2;
    freq_base_ = p.freq_base;
    freq_scale_ = p.freq_scale;
    attn_factor_ = p.attn_factor;
    factors_.assign(p.freq_factors, p.freq_factors ? p.freq_factors + half_ : p.freq_factors);
    inv_freq_.resize(half_);
    for (int32_t i = 0; i < half_; ++i) {
      inv_freq_[i] = std::pow(double(freq_base_), -2.0 * i / p.rot_dim);
      if (p.freq_factors) inv_freq_[i] /= double(p.freq_factors[i]);
    }
    n_pos_ = 0;
    cos_.clear();
    sin_.clear();
  }
  int64_t want = std::min(max_pos + 1, kMaxCached);
  if (want <= n_pos_) return;
  // Grow geometrically so a decode loop does not extend the table every step.
  want = std::min(kMaxCached, std::max(want, std::max<int64_t>(n_pos_ * 2, 256)));
  cos_.resize(want * half_);
  sin_.resize(want * half_);
  for (int64_t pos = n_pos_; pos < want; ++pos) compute(pos, &cos_[pos * half_], &sin_[pos * half_]);
  n_pos_ = want;
}

void RopeTable::row(int64_t pos, const float** cos_out, const float** sin_out, float* scratch) const {
  if (pos >= 0 && pos < n_pos_) {
    *cos_out = &cos_[pos * half_];
    *sin_out = &sin_[pos * half_];
    return;
  }
  compute(pos, scratch, scratch + half_);
  *cos_out = scratch;
  *sin_out = scratch + half_;
}

}  // namespace agentkv::cpu
