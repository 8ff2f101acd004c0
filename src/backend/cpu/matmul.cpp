#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/dot_tile.h"

namespace agentkv {

// Every row count runs the canonical-order kernel (dot_tile.h): a BLAS GEMM
// sums in an order that depends on m (oneDNN and OpenBLAS block by row count),
// which made a request's logits depend on the other rows of its Step. Threads
// take slices of output columns (whole 16-column panels, one per thread), so
// the thread count does not change any output either.
void CpuBackend::matmul(const float* x, const float* w, float* y, int64_t m, int64_t k, int64_t n,
                        bool accumulate) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate) std::memset(y, 0, sizeof(float) * m * n);
    return;
  }
  const int t = pool_.size();
  const int64_t chunk = std::max<int64_t>(16, ((n + t - 1) / t + 15) / 16 * 16);
  const int64_t n_chunks = (n + chunk - 1) / chunk;
  parallel_for(n_chunks, 1, [&](int64_t b, int64_t e) {
    cpu::dot_rows_f32(x, k, w, k, k, y, n, m, b * chunk, std::min(n, e * chunk), accumulate);
  });
}

}  // namespace agentkv
