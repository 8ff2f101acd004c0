// RoPE computed in double from its definition, the reference of the RoPE
// op tests (rope, rope_delta, kv_copy_rotate).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace agentkv::test {

// Straight from the definition: pair i of a head is (2i, 2i+1) (normal) or
// (i, i + rot_dim/2) (NeoX), rotated by theta_i = pos * freq_scale *
// base^(-2i/rot_dim) / factor_i, with cos and sin scaled by attn_factor.
inline std::vector<double> ref_rope(const std::vector<float>& x, const std::vector<int32_t>& pos,
                                    int32_t n_heads, int32_t head_dim, const RopeParams& p) {
  std::vector<double> y(x.begin(), x.end());
  const int32_t half = p.rot_dim / 2;
  for (size_t r = 0; r < pos.size(); ++r)
    for (int32_t h = 0; h < n_heads; ++h)
      for (int32_t i = 0; i < half; ++i) {
        double theta = double(pos[r]) * p.freq_scale * std::pow(double(p.freq_base), -2.0 * i / p.rot_dim);
        if (p.freq_factors) theta /= p.freq_factors[i];
        double c = std::cos(theta) * p.attn_factor, s = std::sin(theta) * p.attn_factor;
        size_t base = (r * n_heads + h) * head_dim;
        size_t a = base + (p.style == RopeStyle::kNeox ? i : 2 * i);
        size_t b = base + (p.style == RopeStyle::kNeox ? i + half : 2 * i + 1);
        double xa = x[a], xb = x[b];
        y[a] = xa * c - xb * s;
        y[b] = xa * s + xb * c;
      }
  return y;
}

}  // namespace agentkv::test
