#include "backend/cpu/matmul_quant.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "backend/cpu/cpu_backend.h"

namespace agentkv {

bool CpuBackend::supports_quant(uint32_t type) const { return cpu::quant_block_elems(type) > 0; }

bool backend_cpu_reads_packed(uint32_t type) { return cpu::quant_block_elems(type) > 0; }

// Output columns (weight rows) split over the pool, one slice per thread:
// decode is bound by reading the packed weights, and each thread streams its
// own rows. Slices are multiples of 8 rows to keep neighbours off each
// other's cache lines of y.
void CpuBackend::matmul_quant(const float* x, const QuantMatrix& w, float* y, int64_t m, bool accumulate) {
  const int64_t n = w.n, k = w.k;
  if (m <= 0 || n <= 0) return;
  const int64_t block = cpu::quant_block_elems(w.type);
  if (block == 0 || k < 0 || k % block != 0) {
    // A caller bug (supports_quant said no, or a malformed matrix): make it
    // loud in the output rather than abort on a request path.
    std::fill(y, y + m * n, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  if (k == 0) {
    if (!accumulate) std::memset(y, 0, sizeof(float) * m * n);
    return;
  }
  const int t = pool_.size();
  const int64_t chunk = std::max<int64_t>(8, ((n + t - 1) / t + 7) / 8 * 8);
  const int64_t n_chunks = (n + chunk - 1) / chunk;
  if (act_quant_ == ActQuant::kQ8 && cpu::q8_supports(w.type)) {
    cpu::q8_resize(q8_x_, m, k);
    parallel_for(m, 16, [&](int64_t b, int64_t e) { cpu::q8_quantize_rows(x, q8_x_, b, e); });
    parallel_for(n_chunks, 1, [&](int64_t b, int64_t e) {
      cpu::q8_gemm_rows(q8_x_, w, y, n, b * chunk, std::min(n, e * chunk), accumulate);
    });
    return;
  }
  parallel_for(n_chunks, 1, [&](int64_t b, int64_t e) {
    cpu::quant_gemv_rows(x, w, y, m, n, b * chunk, std::min(n, e * chunk), accumulate);
  });
}

}  // namespace agentkv
