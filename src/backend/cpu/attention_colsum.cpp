// Attention mass per key position from a subset of one sequence's queries
// (SparseX Sparse-Q selection, docs/scheme_algorithms.md §2.1 step 4: s_j = sum_i A_sq[i, j],
// summed over heads).
//
// Nothing of size n_q x n_heads x n_keys is kept. Work item = (query, kv
// head): it scores the query heads of that kv head (GQA group) against keys
// 0..pos with the canonical dot of dot_tile.h, softmaxes each head's row and
// adds the group's rows, in head order, into a row of its own. The item rows
// are then added into colsum key by key in (query, kv head) order. Queries
// go in batches so that the item rows fit kBatchFloats; since every addition
// into colsum[j] happens in that one order whatever the batch and the thread
// count, neither changes a bit of the result.
#include <algorithm>
#include <atomic>
#include <cassert>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/dot_tile.h"
#include "backend/cpu/kv_convert.h"
#include "backend/cpu/simd.h"

namespace agentkv {

namespace {

// Floats of item rows per batch (16 MiB): 32 queries of a 16K-key sequence
// with 8 kv heads.
constexpr int64_t kBatchFloats = int64_t(1) << 22;

// out[j] = sum over the query heads r < group of qg (in order) of
// softmax_j(qg[r] · k_j * scale) for keys lo <= j <= pos of kv head g, and 0
// for j < lo (a sliding window's start). qg: [group, D] the item's query
// heads; sc, kw: scratch.
void item_row(const float* qg, int32_t group, int32_t lo, int32_t pos, const int32_t* blocks,
              const KvLayerView& kv, int32_t g, float scale, std::vector<float>& sc, std::vector<float>& kw,
              float* out) {
  const int32_t D = kv.head_dim, bs = kv.block_size;
  const int64_t width = int64_t(kv.kv_heads) * D;
  const int64_t n = int64_t(pos) + 1;
  sc.resize(size_t(group) * n);
  // Scores [group, n]: the keys of one block are width elements apart, a
  // weight matrix to dot_rows_f32 (an f16/bf16 block's keys are widened to
  // f32 first, D apart).
  if (kv.dtype != KvDType::kF32) kw.resize(size_t(bs) * D);
  for (int64_t j0 = 0; j0 < n; j0 += bs) {
    const int64_t tn = std::min<int64_t>(bs, n - j0);
    const int64_t off = int64_t(blocks[j0 / bs]) * kv.block_stride + int64_t(g) * D;
    const float* kb = static_cast<const float*>(kv.k) + off;
    int64_t ldk = width;
    if (kv.dtype != KvDType::kF32) {
      for (int64_t t = 0; t < tn; ++t)
        cpu::kv_to_f32(kv.dtype, cpu::kv_elem(kv.k, kv.dtype, off + t * width), &kw[size_t(t) * D], D);
      kb = kw.data();
      ldk = D;
    }
    cpu::dot_rows_f32(qg, D, kb, ldk, D, sc.data() + j0, n, group, 0, tn, false);
  }
  for (int32_t r = 0; r < group; ++r) {
    float* s = sc.data() + r * n;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) {
      s[j] *= scale;
      if (j >= lo) m = std::max(m, s[j]);
    }
    for (int64_t j = 0; j < n; ++j) s[j] -= m;
    cpu::exp_inplace(s, n);
    std::fill(s, s + lo, 0.0f);
    // The denominator in double: a serial float sum of n terms may be off by
    // n * 2^-24 relative (6e-4 at 1e4 keys); beside exp it costs nothing.
    double l = 0;
    for (int64_t j = lo; j < n; ++j) l += s[j];
    const float inv = float(1.0 / l);
    if (r == 0) {
      for (int64_t j = 0; j < n; ++j) out[j] = s[j] * inv;
    } else {
      for (int64_t j = 0; j < n; ++j) out[j] += s[j] * inv;
    }
  }
}

}  // namespace

void CpuBackend::attention_colsum(const float* q, const int32_t* q_pos, int64_t n_q, int32_t n_heads,
                                  const int32_t* blocks, int32_t n_blocks, int32_t n_keys,
                                  const KvLayerView& kv, float scale, float* colsum, int32_t window) {
  if (n_keys <= 0) return;
  std::fill_n(colsum, n_keys, 0.0f);
  if (n_q <= 0) return;
  assert(int64_t(n_keys) <= int64_t(n_blocks) * kv.block_size);
  (void)n_blocks;
  const int32_t n_kv = kv.kv_heads, D = kv.head_dim;
  const int32_t group = n_heads / n_kv;  // query heads per kv head
  const int64_t per_query = int64_t(n_kv) * n_keys;
  const int64_t batch = std::clamp<int64_t>(kBatchFloats / per_query, 1, n_q);
  colsum_rows_.resize(size_t(batch * per_query));
  float* rows = colsum_rows_.data();  // [batch, n_kv, n_keys]

  for (int64_t i0 = 0; i0 < n_q; i0 += batch) {
    const int64_t i1 = std::min(n_q, i0 + batch);
    // Item rows, handed out dynamically: an item's cost grows with its
    // query's position.
    const int64_t n_items = (i1 - i0) * n_kv;
    std::atomic<int64_t> next{0};
    auto worker = [&](int64_t, int64_t, int) {
      std::vector<float> sc, kw;
      for (int64_t it = next.fetch_add(1); it < n_items; it = next.fetch_add(1)) {
        const int64_t i = i0 + it / n_kv;
        const int32_t g = int32_t(it % n_kv);
        assert(q_pos[i] >= 0 && q_pos[i] < n_keys);
        item_row(q + (i * n_heads + int64_t(g) * group) * D, group, attention_key_begin(q_pos[i], window),
                 q_pos[i], blocks, kv, g, scale, sc, kw, rows + it * n_keys);
      }
    };
    if (pool_.size() == 1 || n_items <= 1) {
      worker(0, 1, 0);
    } else {
      pool_.parallel_for(std::min<int64_t>(pool_.size(), n_items), worker);
    }
    // colsum[j] += item rows in (query, kv head) order, split over keys.
    parallel_for(n_keys, 1024, [&](int64_t b, int64_t e) {
      for (int64_t it = 0; it < n_items; ++it) {
        const int64_t end = std::min<int64_t>(e, int64_t(q_pos[i0 + it / n_kv]) + 1);
        const float* row = rows + it * n_keys;
        for (int64_t j = b; j < end; ++j) colsum[j] += row[j];
      }
    });
  }
}

}  // namespace agentkv
