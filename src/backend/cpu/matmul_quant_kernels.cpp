// Kernels behind matmul_quant, both in the canonical reduction order of
// dot_tile.h, so a row's output is the same whichever path runs it:
//  - up to four rows (decode): each weight row is decoded 32 elements at a
//    time and multiplied by the x rows while the decoded values sit in
//    registers, so the packed bytes are read once per call;
//  - more rows (prefill, large batches): a panel of weight rows is decoded to
//    f32 once per call into a buffer that stays in L2, and the f32 tile kernel
//    runs every x row over it. No f32 copy of the weights is kept.
// The decoded values are the same in both (one decoder per type), and each
// output sums fma(w, x, lane) serially per lane, then hsum8.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/dot_tile.h"
#include "backend/cpu/matmul_quant.h"
#include "backend/cpu/matmul_quant_blocks.h"
#include "util/aligned_vector.h"

namespace agentkv::cpu {
namespace {

using quant::Q4_0;
using quant::Q4_1;
using quant::Q4_K;
using quant::Q5_0;
using quant::Q5_1;
using quant::Q5_K;
using quant::Q6_K;
using quant::Q8_0;

// R rows of x (row stride k) against the C weight rows starting at w0.
template <class B, int R, int C>
void quant_tile(const float* x, int64_t k, const uint8_t* w0, int64_t row_bytes, float* y, int64_t ldy,
                bool accumulate) {
  constexpr int kGroups = B::kElems / 32;
  const int64_t nb = k / B::kElems;
#if AGENTKV_AVX2
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  // The tile reads C rows side by side, which the hardware prefetcher follows
  // poorly when the matrix streams from memory (the 49152-row output matrix):
  // fetch the next tile's rows, spread over this tile's blocks.
  const int64_t span = int64_t(C) * row_bytes;
  const int64_t per_block = (span + nb * 64 - 1) / (nb * 64) * 64;
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * B::kElems;
    for (int64_t o = b * per_block; o < std::min(span, (b + 1) * per_block); o += 64)
      _mm_prefetch(reinterpret_cast<const char*>(w0 + span + o), _MM_HINT_T0);
    for (int s = 0; s < kGroups; ++s) {
      for (int c = 0; c < C; ++c) {
        __m256 wv[4];
        B::decode(w0 + c * row_bytes + b * B::kBytes, s, wv);
        for (int r = 0; r < R; ++r)
          for (int t = 0; t < 4; ++t)
            acc[r][c] = _mm256_fmadd_ps(wv[t], _mm256_loadu_ps(xb + r * k + 32 * s + 8 * t), acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) store_out(y + r * ldy + c, hsum8(acc[r][c]), accumulate);
#else
  Lanes8 acc[R][C];
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * B::kElems;
    for (int s = 0; s < kGroups; ++s) {
      for (int c = 0; c < C; ++c) {
        float wv[32];
        B::decode(w0 + c * row_bytes + b * B::kBytes, s, wv);
        for (int r = 0; r < R; ++r)
          for (int e = 0; e < 32; ++e) {
            float& a = acc[r][c].v[e % 8];
            a = std::fma(wv[e], xb[r * k + 32 * s + e], a);
          }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) store_out(y + r * ldy + c, hsum8(acc[r][c]), accumulate);
#endif
}

// R (<= 4) rows of x against weight rows [j0, j1), C columns per tile.
template <class B, int R>
void quant_rows(const float* x, const QuantMatrix& w, float* y, int64_t ldy, int64_t j0, int64_t j1,
                bool accumulate) {
  constexpr int C = R == 1 ? 8 : (R == 2 ? 4 : 2);
  int64_t j = j0;
  for (; j + C <= j1; j += C)
    quant_tile<B, R, C>(x, w.k, w.data + j * w.row_bytes, w.row_bytes, y + j, ldy, accumulate);
  for (; j < j1; ++j) quant_tile<B, R, 1>(x, w.k, w.data + j * w.row_bytes, w.row_bytes, y + j, ldy, accumulate);
}

// panel[(j - j0) * k + e] = dequant(w[j])[e] for j in [j0, j1), through the
// same decoder as quant_tile.
template <class B>
void decode_panel(const QuantMatrix& w, int64_t j0, int64_t j1, float* panel) {
  constexpr int kGroups = B::kElems / 32;
  const int64_t nb = w.k / B::kElems;
  for (int64_t j = j0; j < j1; ++j) {
    const uint8_t* row = w.data + j * w.row_bytes;
    float* out = panel + (j - j0) * w.k;
    for (int64_t b = 0; b < nb; ++b) {
      for (int s = 0; s < kGroups; ++s) {
        float* o = out + b * B::kElems + 32 * s;
#if AGENTKV_AVX2
        __m256 wv[4];
        B::decode(row + b * B::kBytes, s, wv);
        for (int t = 0; t < 4; ++t) _mm256_storeu_ps(o + 8 * t, wv[t]);
#else
        B::decode(row + b * B::kBytes, s, o);
#endif
      }
    }
  }
}

template <class B>
void rows_type(const float* x, const QuantMatrix& w, float* y, int64_t m, int64_t ldy, int64_t n0, int64_t n1,
               bool accumulate) {
  const int64_t k = w.k;
  if (m > 4) {
    // ~96 KiB of decoded weights per panel: L2-resident across all x rows.
    const int64_t panel_rows = std::max<int64_t>(12, (int64_t(24) << 10) / std::max<int64_t>(1, k) / 12 * 12);
    thread_local AlignedVector<float> panel;
    panel.resize(size_t(panel_rows * k));
    for (int64_t j0 = n0; j0 < n1; j0 += panel_rows) {
      const int64_t j1 = std::min(n1, j0 + panel_rows);
      decode_panel<B>(w, j0, j1, panel.data());
      dot_rows_f32(x, k, panel.data(), k, k, y + j0, ldy, m, 0, j1 - j0, accumulate);
    }
    return;
  }
  quant::with_rows(m, [&]<int R>() { quant_rows<B, R>(x, w, y, ldy, n0, n1, accumulate); });
}

// ggml type ids (format/ggml_type.h GgmlType); the backend does not link the
// format module, so they are repeated here.
enum : uint32_t { kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14 };

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
    case kQ5_K:
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
    case kQ5_K:
      return rows_type<Q5_K>(x, w, y, m, ldy, n0, n1, accumulate);
    case kQ6_K:
      return rows_type<Q6_K>(x, w, y, m, ldy, n0, n1, accumulate);
    default:
      return;
  }
}

}  // namespace agentkv::cpu
