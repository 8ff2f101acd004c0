// RoPE delta rotation of rows already rotated by rope: R(p + d) = R(d) R(p),
// so moving a post-RoPE K from position p to p + d rotates it by d alone.
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/rope_rotate.h"

namespace agentkv {

void CpuBackend::rope_delta(float* x, const int32_t* delta, int64_t rows, int32_t n_heads, int32_t head_dim,
                            const RopeParams& p) {
  if (rows <= 0 || p.rot_dim <= 0) return;
  parallel_for(rows, 16, [&](int64_t b, int64_t e) {
    cpu::RopeDeltaRotator rot(p);
    for (int64_t r = b; r < e; ++r) rot.rotate_row(x + r * n_heads * head_dim, n_heads, head_dim, delta[r]);
  });
}

}  // namespace agentkv
