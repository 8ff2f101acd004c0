#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/rope_rotate.h"

namespace agentkv {

// theta_i = pos * freq_scale * base^(-2i/rot_dim) / freq_factors[i];
// (a, b) -> (a cos - b sin, a sin + b cos) on pairs (2i, 2i+1) (normal) or
// (i, i + rot_dim/2) (NeoX); dimensions from rot_dim on are left alone.
// Negative positions are allowed. Cached K moved by a position delta is
// rotated by rope_delta.cpp instead: RoPE at pos = delta would apply
// attn_factor a second time.
// The table of p: the one that already describes it, else the one used less
// recently, remade.
cpu::RopeTable& CpuBackend::rope_table(const RopeParams& p, int64_t max_pos) {
  // (The other one either describes p or is the less recent.)
  const int i = rope_tables_[rope_table_last_].same_params(p) ? rope_table_last_ : 1 - rope_table_last_;
  rope_table_last_ = i;
  rope_tables_[i].prepare(p, max_pos);
  return rope_tables_[i];
}

void CpuBackend::rope(float* x, const int32_t* row_pos, int64_t rows, int32_t n_heads, int32_t head_dim,
                      const RopeParams& p) {
  if (rows <= 0 || p.rot_dim <= 0) return;
  int64_t max_pos = 0;
  for (int64_t r = 0; r < rows; ++r) max_pos = std::max<int64_t>(max_pos, row_pos[r]);
  const cpu::RopeTable& table = rope_table(p, max_pos);
  const int32_t half = table.half();
  const bool neox = p.style == RopeStyle::kNeox;
  parallel_for(rows, 16, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> scratch;  // no allocation per call once grown
    scratch.resize(2 * size_t(half));
    for (int64_t r = b; r < e; ++r) {
      const float *c, *s;
      table.row(row_pos[r], &c, &s, scratch.data());
      for (int32_t h = 0; h < n_heads; ++h)
        cpu::rope_rotate_head(x + (r * n_heads + h) * head_dim, c, s, half, neox);
    }
  });
}

}  // namespace agentkv
