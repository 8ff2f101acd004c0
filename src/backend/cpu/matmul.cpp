#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm.h"

namespace agentkv {

// One pool for every op: the GEMM library runs single-threaded on each pool
// thread over a slice of output columns (rows of w). The libraries' own
// threads (OpenMP for oneDNN, pthreads for OpenBLAS) spin after each call and
// collapse when they compete with the pool or other processes for few cores;
// docs/benchmarks.md, "GEMM library choice" has the numbers behind this choice and the GEMV
// path for few rows.
namespace {
// Up to this many rows (a decode step of a few sequences), streaming w once
// through the GEMV beats the libraries' packing GEMM; from 8 rows on oneDNN
// wins on the layer shapes (docs/benchmarks.md, "GEMM library choice", "Few rows").
constexpr int64_t kGemvMaxRows = 4;
}  // namespace

void CpuBackend::matmul(const float* x, const float* w, float* y, int64_t m, int64_t k, int64_t n,
                        bool accumulate) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate) std::memset(y, 0, sizeof(float) * m * n);
    return;
  }
  const int t = pool_.size();
  // Slices of whole 16-column panels, at most one per thread.
  const int64_t chunk = std::max<int64_t>(16, ((n + t - 1) / t + 15) / 16 * 16);
  const int64_t n_chunks = (n + chunk - 1) / chunk;
  if (m <= kGemvMaxRows) {
    parallel_for(n_chunks, 1, [&](int64_t b, int64_t e) {
      cpu::gemv_nt_rows(x, w, y, m, k, n, b * chunk, std::min(n, e * chunk), accumulate);
    });
    return;
  }
  const float beta = accumulate ? 1.0f : 0.0f;
  parallel_for(n_chunks, 1, [&](int64_t b, int64_t e) {
    cpu::gemm_single_thread_here();
    int64_t n0 = b * chunk, n1 = std::min(n, e * chunk);
    cpu::sgemm_nt(x, w + n0 * k, y + n0, m, n1 - n0, k, n, beta);
  });
}

}  // namespace agentkv
