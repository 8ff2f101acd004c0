// The one reduction order of every CPU product (docs/design.md §4, batch
// invariance). An output y[i, j] = dot(x[i], w[j]) over k elements is summed
//   - in 8 lanes, lane l holding the elements k' = l (mod 8);
//   - each lane serially in increasing k', one fused multiply-add fma(w, x, acc)
//     per element, starting from +0 (a zero-padded last chunk when k % 8 != 0);
//   - then the lanes reduced by hsum8's fixed tree, and y = s or y + s.
// Every kernel that computes a dot product of a row (f32 or decoded quantized
// weights, one row or a tile of rows, any thread) follows it, so a token row's
// result never depends on the row count of its Step, the other rows in it or
// the thread count: "exact" schemes are bitwise exact. Tiles only change how
// many independent (row, column) chains are in flight, never a chain's order.
#pragma once

#include <cstdint>

#include "backend/cpu/simd.h"

#include "backend/cpu/asan_check.h"

namespace agentkv::cpu {

// Rows [0, n) of p, row r at p + r * ld, each of len floats: addressable
// (asan_check.h; nothing outside ASan builds).
inline void check_rows(const float* p, int64_t ld, int64_t n, int64_t len) {
  if (len <= 0) return;
  for (int64_t r = 0; r < n; ++r) check_region(p + r * ld, static_cast<size_t>(len) * sizeof(float));
}

inline void store_out(float* y, float s, bool accumulate) { *y = accumulate ? *y + s : s; }

#if AGENTKV_AVX2
// The first n (< 8) floats of p, the other lanes +0.
inline __m256 load_partial(const float* p, int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), idx);
  return _mm256_maskload_ps(p, mask);
}
#else
// The scalar form of the same order: eight lane sums and hsum8's tree.
struct Lanes8 {
  float v[8] = {};
};
inline float hsum8(const Lanes8& a) {
  const float* v = a.v;
  return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}
#endif

// y[r * ldy + c] (+)= dot(x[r], w[c]) for r < R, c < C over k elements:
// rows of x start ldx floats apart, rows of w ldw apart.
template <int R, int C>
AGENTKV_TILE_NO_SANITIZE inline void dot_tile_f32(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t k, float* y, int64_t ldy,
                         bool accumulate) {
#if AGENTKV_AVX2
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    __m256 wv[C];
    for (int c = 0; c < C; ++c) wv[c] = _mm256_loadu_ps(w + c * ldw + i);
    for (int r = 0; r < R; ++r) {
      __m256 xv = _mm256_loadu_ps(x + r * ldx + i);
      // Keep x in a register: folded into each FMA as a memory operand it
      // costs R * C loads per step instead of R, and the loads, not the FMAs,
      // become the bottleneck.
      __asm__("" : "+x"(xv));
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(wv[c], xv, acc[r][c]);
    }
  }
  if (i < k) {
    __m256 wv[C];
    for (int c = 0; c < C; ++c) wv[c] = load_partial(w + c * ldw + i, k - i);
    for (int r = 0; r < R; ++r) {
      const __m256 xv = load_partial(x + r * ldx + i, k - i);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(wv[c], xv, acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) store_out(y + r * ldy + c, hsum8(acc[r][c]), accumulate);
#else
  Lanes8 acc[R][C];
  for (int64_t i = 0; i < k; ++i)
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) {
        float& a = acc[r][c].v[i % 8];
        a = std::fma(w[c * ldw + i], x[r * ldx + i], a);
      }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) store_out(y + r * ldy + c, hsum8(acc[r][c]), accumulate);
#endif
}

// Rows [0, m) of x against weight rows [j0, j1) of w, in the canonical order:
// tiles of 4 rows x 3 columns (12 accumulators: the FMA units stay busy)
// with smaller tiles at the edges. y row stride ldy.
void dot_rows_f32(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t k, float* y, int64_t ldy,
                  int64_t m, int64_t j0, int64_t j1, bool accumulate);

}  // namespace agentkv::cpu
