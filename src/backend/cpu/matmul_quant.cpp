#include "backend/cpu/matmul_quant.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/k8_layout.h"

namespace agentkv {

bool CpuBackend::supports_quant(uint32_t type) const { return cpu::quant_block_elems(type) > 0; }

bool backend_cpu_reads_packed(uint32_t type) { return cpu::quant_block_elems(type) > 0; }

// Only the q8 path has a layout of its own (its prefill panels, and q4_K's
// and q6_K's decode records); the f32 path reads the file's blocks.
PreparedWeights CpuBackend::prepare_weights(const QuantMatrix& w, bool decode_only) {
  if (!prepack_weights_ || act_quant_ != ActQuant::kQ8) return {};
  std::shared_ptr<const cpu::Q8Panel> p = cpu::q8_prepack(w, decode_only);
  if (!p) return {};
  const int64_t bytes = p->bytes();
  return {std::move(p), bytes};
}

// Output columns (weight rows) split over the pool, one slice per thread:
// decode is bound by reading the packed weights, and each thread streams its
// own rows. Slices are multiples of 8 rows to keep neighbours off each
// other's cache lines of y.
namespace {

// The column slice of one thread: a multiple of `align` (8, or the widest
// panel group where prefill reads weights laid out at load, so that every
// slice starts on one of its groups), at least `align`.
int64_t column_chunk(int64_t n, int threads, int64_t align = 8) {
  return std::max<int64_t>(align, ((n + threads - 1) / threads + align - 1) / align * align);
}

// The slices' alignment of a q8 product with m rows of w.
int64_t q8_align(const QuantMatrix& w, int64_t m) {
  return w.layout != nullptr && m > 4 ? cpu::kQ8PanelCols : 8;
}

}  // namespace

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
  if (w.k8 && act_quant_ != ActQuant::kQ8) {
    // The f32 kernels read the file's blocks: back from the records, per
    // call (the engine lays matrices out so only under q8; this is for
    // other callers of the same weights).
    std::vector<uint8_t> file;
    const QuantMatrix f = cpu::k8_file_rows(w, 0, n, file);
    CpuBackend::matmul_quant(x, f, y, m, accumulate);
    return;
  }
  if (act_quant_ == ActQuant::kQ8 && cpu::q8_supports(w.type)) {
    const int64_t chunk = column_chunk(n, pool_.size(), q8_align(w, m));
    const int64_t n_chunks = (n + chunk - 1) / chunk;
    cpu::q8_resize(q8_x_, m, k);
    parallel_for(m, 16, [&](int64_t b, int64_t e) { cpu::q8_quantize_rows(x, q8_x_, b, e); });
    parallel_for(n_chunks, 1, [&](int64_t b, int64_t e) {
      cpu::q8_gemm_rows(q8_x_, w, y, n, b * chunk, std::min(n, e * chunk), accumulate);
    });
    return;
  }
  const int64_t chunk = column_chunk(n, pool_.size());
  const int64_t n_chunks = (n + chunk - 1) / chunk;
  parallel_for(n_chunks, 1, [&](int64_t b, int64_t e) {
    cpu::quant_gemv_rows(x, w, y, m, n, b * chunk, std::min(n, e * chunk), accumulate);
  });
}

// Both matrices' column slices in one pass over the pool, and under kQ8 the
// rows rounded once: one fork-join and one quantization instead of two. Each
// column is computed by the kernel matmul_quant would use, and its value
// does not depend on the slicing, so the bits are the same.
void CpuBackend::matmul_quant_pair(const float* x, const QuantMatrix& a, float* ya, const QuantMatrix& b, float* yb,
                                   int64_t m) {
  const int64_t block_a = cpu::quant_block_elems(a.type), block_b = cpu::quant_block_elems(b.type);
  const bool q8 = act_quant_ == ActQuant::kQ8 && cpu::q8_supports(a.type);
  if (m <= 0 || a.k != b.k || a.k <= 0 || a.n <= 0 || b.n <= 0 || block_a == 0 || block_b == 0 ||
      a.k % block_a != 0 || a.k % block_b != 0 || q8 != (act_quant_ == ActQuant::kQ8 && cpu::q8_supports(b.type)) ||
      (!q8 && (a.k8 || b.k8))) {
    CpuBackend::matmul_quant(x, a, ya, m);
    CpuBackend::matmul_quant(x, b, yb, m);
    return;
  }
  const int t = pool_.size();
  const int64_t chunk_a = column_chunk(a.n, t, q8 ? q8_align(a, m) : 8);
  const int64_t chunk_b = column_chunk(b.n, t, q8 ? q8_align(b, m) : 8);
  const int64_t n_a = (a.n + chunk_a - 1) / chunk_a, n_b = (b.n + chunk_b - 1) / chunk_b;
  if (q8) {
    cpu::q8_resize(q8_x_, m, a.k);
    parallel_for(m, 16, [&](int64_t lo, int64_t hi) { cpu::q8_quantize_rows(x, q8_x_, lo, hi); });
  }
  parallel_for(n_a + n_b, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const bool first = i < n_a;
      const QuantMatrix& w = first ? a : b;
      float* y = first ? ya : yb;
      const int64_t chunk = first ? chunk_a : chunk_b, c0 = (first ? i : i - n_a) * chunk;
      const int64_t c1 = std::min(w.n, c0 + chunk);
      if (q8) {
        cpu::q8_gemm_rows(q8_x_, w, y, w.n, c0, c1, false);
      } else {
        cpu::quant_gemv_rows(x, w, y, m, w.n, c0, c1, false);
      }
    }
  });
}

}  // namespace agentkv
