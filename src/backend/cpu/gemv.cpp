// Products of f32 rows with f32 weight rows in the canonical reduction order
// of dot_tile.h, for any row count: decode (one row), small batches and
// prefill use the same arithmetic per output, only the tile shape changes.
#include <algorithm>

#include "backend/cpu/dot_tile.h"
#include "backend/cpu/gemm.h"

namespace agentkv::cpu {

namespace {

// R rows of x against weight rows [j0, j1): C columns per tile, R * C chains
// in flight, within the 16 vector registers.
template <int R>
void rows_tile(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t k, float* y, int64_t ldy,
               int64_t j0, int64_t j1, bool accumulate) {
  constexpr int C = R <= 2 ? 4 : 3;
  int64_t j = j0;
  for (; j + C <= j1; j += C) dot_tile_f32<R, C>(x, ldx, w + j * ldw, ldw, k, y + j, ldy, accumulate);
  for (; j < j1; ++j) dot_tile_f32<R, 1>(x, ldx, w + j * ldw, ldw, k, y + j, ldy, accumulate);
}

}  // namespace

void dot_rows_f32(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t k, float* y, int64_t ldy,
                  int64_t m, int64_t j0, int64_t j1, bool accumulate) {
  // What the uninstrumented tiles will touch (dot_tile.h), under ASan.
  check_rows(x, ldx, m, k);
  check_rows(w + j0 * ldw, ldw, j1 - j0, k);
  check_rows(y + j0, ldy, m, j1 - j0);
  // ~64 KiB of w per column block: it stays in L2 (512 KiB here) while every
  // tile of x rows passes over it, so w is read from memory once.
  const int64_t block = std::max<int64_t>(12, (int64_t(16) << 10) / std::max<int64_t>(1, k) / 12 * 12);
  for (int64_t b0 = j0; b0 < j1; b0 += block) {
    const int64_t b1 = std::min(j1, b0 + block);
    for (int64_t i = 0; i < m; i += 4) {
      const float* xi = x + i * ldx;
      float* yi = y + i * ldy;
      switch (std::min<int64_t>(4, m - i)) {
        case 1:
          rows_tile<1>(xi, ldx, w, ldw, k, yi, ldy, b0, b1, accumulate);
          break;
        case 2:
          rows_tile<2>(xi, ldx, w, ldw, k, yi, ldy, b0, b1, accumulate);
          break;
        case 3:
          rows_tile<3>(xi, ldx, w, ldw, k, yi, ldy, b0, b1, accumulate);
          break;
        default:
          rows_tile<4>(xi, ldx, w, ldw, k, yi, ldy, b0, b1, accumulate);
          break;
      }
    }
  }
}

void gemv_nt(const float* x, const float* w, float* y, int64_t k, int64_t n0, int64_t n1, bool accumulate) {
  dot_rows_f32(x, k, w, k, k, y, 0, 1, n0, n1, accumulate);
}

}  // namespace agentkv::cpu
