// Grouped LoRA for a subset of rows: y[rows[i]] += scale · (x[rows[i]] · A^T) · B^T.
//
// The product is never formed as a (n, k) matrix: the rank-r intermediate
// t = scale · x · A^T is computed first, then t · B^T is added to y. Two
// paths, chosen by row count:
//  - few rows (decode, an ICaRus decoder row): the streaming GEMV of matmul's
//    decode path (gemv.cpp) on each row, threaded over output columns only when
//    a call has enough work to pay for waking the pool;
//  - many rows (prefill): gather the rows, two library GEMMs through matmul,
//    scatter-add. Contiguous ascending rows (one sequence's chunk) skip the
//    gather and the scatter: the second GEMM accumulates into y directly.
#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm.h"

namespace agentkv {

namespace {
// Up to this many rows the GEMV path wins, as for matmul (matmul.cpp).
constexpr int64_t kLoraGemvMaxRows = 4;
// Multiply-adds per thread chunk below which the pool is not woken: a wake
// costs a few microseconds, a decode-sized rank-8 LoRA less than that in all.
constexpr int64_t kMinChunkWork = 16384;

bool contiguous(const int32_t* rows, int64_t n_rows) {
  for (int64_t i = 1; i < n_rows; ++i)
    if (rows[i] != rows[0] + i) return false;
  return true;
}
}  // namespace

void CpuBackend::lora(const float* x, int64_t k, const LoraView& w, const int32_t* rows, int64_t n_rows, float* y,
                      int64_t n) {
  if (n_rows <= 0 || w.rank <= 0 || n <= 0 || k <= 0) return;  // k == 0: x · A^T is zero
  const int64_t r = w.rank;
  lora_t_.resize(size_t(n_rows * r));
  float* t = lora_t_.data();  // (n_rows, rank)

  if (n_rows <= kLoraGemvMaxRows) {
    // t[i] = scale · x[rows[i]] · A^T, split over rank outputs.
    const int64_t grain1 = std::max<int64_t>(1, kMinChunkWork / (k * n_rows));
    parallel_for(r, grain1, [&](int64_t r0, int64_t r1) {
      for (int64_t i = 0; i < n_rows; ++i) {
        float* ti = t + i * r;
        cpu::gemv_nt(x + int64_t{rows[i]} * k, w.a, ti, k, r0, r1, /*accumulate=*/false);
        for (int64_t j = r0; j < r1; ++j) ti[j] *= w.scale;
      }
    });
    // y[rows[i]] += t[i] · B^T, split over output columns in 16-column panels
    // so neighbouring threads do not share cache lines of y.
    const int64_t panels = (n + 15) / 16;
    const int64_t grain2 = std::max<int64_t>(1, kMinChunkWork / (16 * r * n_rows));
    parallel_for(panels, grain2, [&](int64_t p0, int64_t p1) {
      const int64_t j0 = p0 * 16, j1 = std::min(n, p1 * 16);
      for (int64_t i = 0; i < n_rows; ++i)
        cpu::gemv_nt(t + i * r, w.b, y + int64_t{rows[i]} * n, r, j0, j1, /*accumulate=*/true);
    });
    return;
  }

  const bool contig = contiguous(rows, n_rows);
  const float* xg = x + int64_t{rows[0]} * k;  // (n_rows, k)
  if (!contig) {
    lora_x_.resize(size_t(n_rows * k));
    parallel_for(n_rows, 64, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        std::memcpy(&lora_x_[size_t(i * k)], x + int64_t{rows[i]} * k, sizeof(float) * k);
    });
    xg = lora_x_.data();
  }
  matmul(xg, w.a, t, n_rows, k, r);
  for (int64_t i = 0; i < n_rows * r; ++i) t[i] *= w.scale;
  if (contig) {
    matmul(t, w.b, y + int64_t{rows[0]} * n, n_rows, r, n, /*accumulate=*/true);
    return;
  }
  lora_y_.resize(size_t(n_rows * n));
  matmul(t, w.b, lora_y_.data(), n_rows, r, n);
  parallel_for(n_rows, 64, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float* yr = y + int64_t{rows[i]} * n;
      const float* d = &lora_y_[size_t(i * n)];
      for (int64_t j = 0; j < n; ++j) yr[j] += d[j];
    }
  });
}

}  // namespace agentkv

namespace agentkv {

// The LR cache's rows: t[i] = x[rows[i]] · A^T, the first half of lora()
// without the scale, on the same two paths (so a row's t does not depend on
// how many rows share the call: gemv_nt and matmul keep one order).
void CpuBackend::lora_down(const float* x, int64_t k, const float* a, int32_t rank, const int32_t* rows,
                           int64_t n_rows, float* t) {
  if (n_rows <= 0 || rank <= 0) return;
  const int64_t r = rank;
  if (k <= 0) {
    std::fill(t, t + n_rows * r, 0.0f);
    return;
  }
  if (n_rows <= kLoraGemvMaxRows) {
    const int64_t grain = std::max<int64_t>(1, kMinChunkWork / (k * n_rows));
    parallel_for(r, grain, [&](int64_t r0, int64_t r1) {
      for (int64_t i = 0; i < n_rows; ++i) cpu::gemv_nt(x + int64_t{rows[i]} * k, a, t + i * r, k, r0, r1, false);
    });
    return;
  }
  const float* xg = x + int64_t{rows[0]} * k;
  if (!contiguous(rows, n_rows)) {
    lora_x_.resize(size_t(n_rows * k));
    parallel_for(n_rows, 64, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        std::memcpy(&lora_x_[size_t(i * k)], x + int64_t{rows[i]} * k, sizeof(float) * k);
    });
    xg = lora_x_.data();
  }
  matmul(xg, a, t, n_rows, k, r);
}

}  // namespace agentkv
