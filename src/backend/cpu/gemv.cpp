// Single-row product for decode. BLAS sgemm with m = 1 packs w for a reuse
// that never comes; a plain streaming dot product per output is memory-bound
// and needs no packing (docs/benchmarks.md, "GEMM library choice" has the comparison).
#include <algorithm>

#include "backend/cpu/gemm.h"
#include "backend/cpu/simd.h"

namespace agentkv::cpu {

void gemv_nt(const float* x, const float* w, float* y, int64_t k, int64_t n0, int64_t n1, bool accumulate) {
  int64_t j = n0;
#if AGENTKV_AVX2
  // Four outputs at a time share each load of x.
  for (; j + 4 <= n1; j += 4) {
    const float* w0 = w + j * k;
    const float* w1 = w0 + k;
    const float* w2 = w1 + k;
    const float* w3 = w2 + k;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(),
           a3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
      __m256 xv = _mm256_loadu_ps(x + i);
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + i), xv, a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + i), xv, a1);
      a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + i), xv, a2);
      a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w3 + i), xv, a3);
    }
    float s0 = hsum8(a0), s1 = hsum8(a1), s2 = hsum8(a2), s3 = hsum8(a3);
    for (; i < k; ++i) {
      s0 += w0[i] * x[i];
      s1 += w1[i] * x[i];
      s2 += w2[i] * x[i];
      s3 += w3[i] * x[i];
    }
    if (accumulate) {
      y[j] += s0, y[j + 1] += s1, y[j + 2] += s2, y[j + 3] += s3;
    } else {
      y[j] = s0, y[j + 1] = s1, y[j + 2] = s2, y[j + 3] = s3;
    }
  }
#endif
  for (; j < n1; ++j) {
    float s = dot_f32(x, w + j * k, k);
    y[j] = accumulate ? y[j] + s : s;
  }
}

void gemv_nt_rows(const float* x, const float* w, float* y, int64_t m, int64_t k, int64_t ldy, int64_t n0,
                  int64_t n1, bool accumulate) {
  // ~64 KiB of w per block: resident in L2 (512 KiB here) across the m passes.
  const int64_t block = std::max<int64_t>(4, (int64_t(16) << 10) / std::max<int64_t>(1, k) / 4 * 4);
  for (int64_t j0 = n0; j0 < n1; j0 += block) {
    const int64_t j1 = std::min(n1, j0 + block);
    for (int64_t i = 0; i < m; ++i) gemv_nt(x + i * k, w, y + i * ldy, k, j0, j1, accumulate);
  }
}

}  // namespace agentkv::cpu
