// cos/sin of RoPE angles by position, computed in double and kept while the
// RoPE parameters stay the same (every layer of a model uses one set), so a
// forward pays for the trigonometry once per new position, not per layer.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace agentkv::cpu {

class RopeTable {
 public:
  // Makes the table describe p and cover positions [0, max_pos]. Positions
  // outside [0, kMaxCached) are never cached; row() computes them.
  void prepare(const RopeParams& p, int64_t max_pos);

  // cos and sin (each rot_dim/2, already scaled by attn_factor) for pos.
  // Uses `scratch` (rot_dim floats) when pos is not cached.
  void row(int64_t pos, const float** cos_out, const float** sin_out, float* scratch) const;

  int32_t half() const { return half_; }
  // The table describes p (prepare would keep what it holds).
  bool same_params(const RopeParams& p) const;

  static constexpr int64_t kMaxCached = int64_t(1) << 15;

 private:
  void compute(int64_t pos, float* cos_out, float* sin_out) const;

  int32_t half_ = 0;
  float freq_base_ = 0, freq_scale_ = 0, attn_factor_ = 0;
  std::vector<float> factors_;    // copy of freq_factors (empty when none)
  std::vector<double> inv_freq_;  // [half] base^(-2i/rot_dim) / factor_i
  int64_t n_pos_ = 0;             // positions cached
  std::vector<float> cos_, sin_;  // [n_pos, half]
};

}  // namespace agentkv::cpu
