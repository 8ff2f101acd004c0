// Row kernels behind matmul_quant: each weight row is decoded 32 elements at
// a time and multiplied by up to four rows of x while the decoded values sit
// in registers, so the packed bytes are read once per group of four x rows
// (and from L2, not memory, after the first group: see quant_gemv_rows).
#include <algorithm>

#include "backend/cpu/matmul_quant.h"
#include "backend/cpu/matmul_quant_blocks.h"

namespace agentkv::cpu {
namespace {

using quant::Q4_0;
using quant::Q4_1;
using quant::Q4_K;
using quant::Q5_0;
using quant::Q5_1;
using quant::Q6_K;
using quant::Q8_0;

inline void store(float* y, float s, bool accumulate) { *y = accumulate ? *y + s : s; }

// R rows of x (row stride k) against weight rows [j0, j1).
template <class B, int R>
void rows_kernel(const float* x, int64_t k, const QuantMatrix& w, float* y, int64_t ldy, int64_t j0,
                 int64_t j1, bool accumulate) {
  constexpr int kGroups = B::kElems / 32;
  const int64_t nb = k / B::kElems;
  for (int64_t j = j0; j < j1; ++j) {
    const uint8_t* row = w.data + j * w.row_bytes;
#if AGENTKV_AVX2
    // Enough independent FMA chains to hide their latency: four in all.
    constexpr int A = R == 1 ? 4 : (R == 2 ? 2 : 1);
    __m256 acc[R][A];
    for (int r = 0; r < R; ++r)
      for (int a = 0; a < A; ++a) acc[r][a] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = row + b * B::kBytes;
      const float* xb = x + b * B::kElems;
      for (int s = 0; s < kGroups; ++s) {
        __m256 wv[4];
        B::decode(blk, s, wv);
        for (int r = 0; r < R; ++r)
          for (int t = 0; t < 4; ++t)
            acc[r][t % A] =
                _mm256_fmadd_ps(wv[t], _mm256_loadu_ps(xb + r * k + 32 * s + 8 * t), acc[r][t % A]);
      }
    }
    for (int r = 0; r < R; ++r) {
      __m256 v = acc[r][0];
      for (int a = 1; a < A; ++a) v = _mm256_add_ps(v, acc[r][a]);
      store(y + r * ldy + j, hsum8(v), accumulate);
    }
#else
    float acc[R] = {};
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = row + b * B::kBytes;
      const float* xb = x + b * B::kElems;
      for (int s = 0; s < kGroups; ++s) {
        float wv[32];
        B::decode(blk, s, wv);
        for (int r = 0; r < R; ++r) {
          const float* xr = xb + r * k + 32 * s;
          float sum = 0.0f;
          for (int e = 0; e < 32; ++e) sum += wv[e] * xr[e];
          acc[r] += sum;
        }
      }
    }
    for (int r = 0; r < R; ++r) store(y + r * ldy + j, acc[r], accumulate);
#endif
  }
}

template <class B>
void rows_type(const float* x, const QuantMatrix& w, float* y, int64_t m, int64_t ldy, int64_t n0, int64_t n1,
               bool accumulate) {
  const int64_t k = w.k;
  // Output columns per tile: ~64 KiB of packed rows, which stay in L2 (512
  // KiB here) while every group of four x rows passes over them.
  const int64_t tile =
      m <= 4 ? n1 - n0 : std::max<int64_t>(4, (int64_t(64) << 10) / std::max<int64_t>(1, w.row_bytes));
  for (int64_t j0 = n0; j0 < n1; j0 += tile) {
    const int64_t j1 = std::min(n1, j0 + tile);
    for (int64_t i = 0; i < m; i += 4) {
      const float* xi = x + i * k;
      float* yi = y + i * ldy;
      switch (std::min<int64_t>(4, m - i)) {
        case 1:
          rows_kernel<B, 1>(xi, k, w, yi, ldy, j0, j1, accumulate);
          break;
        case 2:
          rows_kernel<B, 2>(xi, k, w, yi, ldy, j0, j1, accumulate);
          break;
        case 3:
          rows_kernel<B, 3>(xi, k, w, yi, ldy, j0, j1, accumulate);
          break;
        default:
          rows_kernel<B, 4>(xi, k, w, yi, ldy, j0, j1, accumulate);
          break;
      }
    }
  }
}

// ggml type ids (format/ggml_type.h GgmlType); the backend does not link the
// format module, so they are repeated here.
enum : uint32_t { kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ4_K = 12, kQ6_K = 14 };

}  // namespace

int64_t quant_block_elems(uint32_t type) {
  switch (type) {
    case kQ4_0:
    case kQ4_1:
    case kQ5_0:
    case kQ5_1:
    case kQ8_0:
      return 32;
    case kQ4_K:
    case kQ6_K:
      return 256;
    default:
      return 0;
  }
}

void quant_gemv_rows(const float* x, const QuantMatrix& w, float* y, int64_t m, int64_t ldy, int64_t n0,
                     int64_t n1, bool accumulate) {
  switch (w.type) {
    case kQ4_0:
      return rows_type<Q4_0>(x, w, y, m, ldy, n0, n1, accumulate);
    case kQ4_1:
      return rows_type<Q4_1>(x, w, y, m, ldy, n0, n1, accumulate);
    case kQ5_0:
      return rows_type<Q5_0>(x, w, y, m, ldy, n0, n1, accumulate);
    case kQ5_1:
      return rows_type<Q5_1>(x, w, y, m, ldy, n0, n1, accumulate);
    case kQ8_0:
      return rows_type<Q8_0>(x, w, y, m, ldy, n0, n1, accumulate);
    case kQ4_K:
      return rows_type<Q4_K>(x, w, y, m, ldy, n0, n1, accumulate);
    case kQ6_K:
      return rows_type<Q6_K>(x, w, y, m, ldy, n0, n1, accumulate);
    default:
      return;
  }
}

}  // namespace agentkv::cpu
