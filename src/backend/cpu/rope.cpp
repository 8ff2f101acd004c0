#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace agentkv {

// theta_i = pos * freq_scale * base^(-2i/rot_dim) / freq_factors[i];
// (a, b) -> (a cos - b sin, a sin + b cos) on pairs (2i, 2i+1) (normal) or
// (i, i + rot_dim/2) (NeoX); dimensions from rot_dim on are left alone.
// Negative positions are allowed: rotating cached K by a position delta
// (KvStore segment moves) is RoPE at pos = delta.
void CpuBackend::rope(float* x, const int32_t* row_pos, int64_t rows, int32_t n_heads, int32_t head_dim,
                      const RopeParams& p) {
  if (rows <= 0 || p.rot_dim <= 0) return;
  int64_t max_pos = 0;
  for (int64_t r = 0; r < rows; ++r) max_pos = std::max<int64_t>(max_pos, row_pos[r]);
  rope_table_.prepare(p, max_pos);
  const int32_t half = rope_table_.half();
  const bool neox = p.style == RopeStyle::kNeox;
  parallel_for(rows, 16, [&](int64_t b, int64_t e) {
    std::vector<float> scratch(2 * half);
    for (int64_t r = b; r < e; ++r) {
      const float *c, *s;
      rope_table_.row(row_pos[r], &c, &s, scratch.data());
      for (int32_t h = 0; h < n_heads; ++h) {
        float* v = x + (r * n_heads + h) * head_dim;
        if (neox) {
          for (int32_t i = 0; i < half; ++i) {
            float a = v[i], bb = v[i + half];
            v[i] = a * c[i] - bb * s[i];
            v[i + half] = a * s[i] + bb * c[i];
          }
        } else {
          for (int32_t i = 0; i < half; ++i) {
            float a = v[2 * i], bb = v[2 * i + 1];
            v[2 * i] = a * c[i] - bb * s[i];
            v[2 * i + 1] = a * s[i] + bb * c[i];
          }
        }
      }
    }
  });
}

}  // namespace agentkv
