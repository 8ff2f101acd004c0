#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/simd.h"

namespace agentkv {

void CpuBackend::rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps) {
  // Rows are independent; a decode row is too small to split.
  parallel_for(rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, dim)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x + r * dim;
      float* yr = y + r * dim;
      float ss = cpu::dot_f32(xr, xr, dim);
      float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
      for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv * w[i];
    }
  });
}

}  // namespace agentkv
