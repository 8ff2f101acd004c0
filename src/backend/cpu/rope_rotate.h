// The rotation of RoPE's 2-D pairs, shared by rope.cpp (rotate by a
// position) and by rope_delta.cpp and kv_copy_rotate.cpp (rotate cached
// post-RoPE K on by a position delta: R(p + d) k = R(d) R(p) k).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace agentkv::cpu {

// (a, b) -> (a c - b s, a s + b c) on the pairs of one head: (2i, 2i+1)
// (normal) or (i, i + half) (NeoX) for i < half. Later dimensions (from
// rot_dim = 2 * half on) are left alone.
inline void rope_rotate_head(float* v, const float* c, const float* s, int32_t half, bool neox) {
  if (neox) {
    for (int32_t i = 0; i < half; ++i) {
      float a = v[i], b = v[i + half];
      v[i] = a * c[i] - b * s[i];
      v[i + half] = a * s[i] + b * c[i];
    }
  } else {
    for (int32_t i = 0; i < half; ++i) {
      float a = v[2 * i], b = v[2 * i + 1];
      v[2 * i] = a * c[i] - b * s[i];
      v[2 * i + 1] = a * s[i] + b * c[i];
    }
  }
}

// Rotates rows of heads by a position delta, with the angles of rope (and
// RopeTable): theta_i = d * freq_scale * base^(-2i/rot_dim) / freq_factors[i].
// attn_factor is not applied: a delta moves K that rope already scaled, and
// a second factor would scale it twice. One per thread: it keeps the cos/sin
// of the last delta, so rows sharing a delta (a moved segment) pay for the
// trigonometry once.
class RopeDeltaRotator {
 public:
  explicit RopeDeltaRotator(const RopeParams& p)
      : half_(p.rot_dim / 2),
        neox_(p.style == RopeStyle::kNeox),
        freq_scale_(p.freq_scale),
        inv_freq_(half_),
        cos_(half_),
        sin_(half_) {
    for (int32_t i = 0; i < half_; ++i) {
      inv_freq_[i] = std::pow(double(p.freq_base), -2.0 * i / p.rot_dim);
      if (p.freq_factors) inv_freq_[i] /= double(p.freq_factors[i]);
    }
  }

  // Rotates heads [0, n_heads) of one row (heads head_dim floats apart) by
  // delta. delta = 0 leaves the row bit for bit as it was.
  void rotate_row(float* row, int32_t n_heads, int32_t head_dim, int64_t delta) {
    if (delta == 0 || half_ <= 0) return;
    if (!have_ || delta != delta_) set_delta(delta);
    for (int32_t h = 0; h < n_heads; ++h)
      rope_rotate_head(row + int64_t(h) * head_dim, cos_.data(), sin_.data(), half_, neox_);
  }

 private:
  void set_delta(int64_t delta) {
    // In double: at |d| ~ 1e5 the angle of the fastest pair (1 rad per
    // position) rounded to float is off by up to 4e-3 rad (half an ulp of
    // 1e5); the reason RopeTable::compute uses double too.
    const double scaled = double(delta) * freq_scale_;
    for (int32_t i = 0; i < half_; ++i) {
      const double theta = scaled * inv_freq_[i];
      cos_[i] = float(std::cos(theta));
      sin_[i] = float(std::sin(theta));
    }
    delta_ = delta;
    have_ = true;
  }

  int32_t half_;
  bool neox_;
  float freq_scale_;
  std::vector<double> inv_freq_;  // [half] base^(-2i/rot_dim) / factor_i, as RopeTable
  std::vector<float> cos_, sin_;  // [half] of delta_
  int64_t delta_ = 0;
  bool have_ = false;
};

}  // namespace agentkv::cpu
