// Paged causal attention over CSR block tables (FlashInfer's layout), for
// query rows at arbitrary positions.
//
// Work item = (sequence, tile of consecutive rows, kv head, query heads of
// that kv head). Its query vectors (rows x heads sharing the kv head, GQA) are
// processed together against tiles of kKeys keys: the key tile is gathered
// from the blocks once, transposed to [head_dim][kKeys] so q·K for 8 keys is
// one FMA per dimension with no horizontal sums, and reused by every query
// of the item. Softmax is online (FlashAttention's running max and sum), so
// nothing of size kv_len is materialised. Items are handed out dynamically,
// largest first: under a causal mask later rows cost more.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/simd.h"

namespace agentkv {

namespace {

constexpr int kKeys = 32;     // keys per tile
constexpr int kQueries = 32;  // query vectors per work item, when rows allow

struct Item {
  int32_t seq, r0, r1;  // rows [r0, r1) of sequence seq
  int32_t kvh, h0, h1;  // kv head and query heads [h0, h1)
  int64_t cost;
};

struct Scratch {
  std::vector<float> qs;          // [nq, D] scaled queries
  std::vector<float> kt;          // [D, kKeys] key tile, transposed
  std::vector<const float*> vp;   // [kKeys] value rows of the tile
  std::vector<float> s;           // [nq, kKeys] scores, then probabilities
  std::vector<float> acc;         // [nq, D] unnormalised output
  std::vector<float> m, l;        // [nq] running max and sum
  std::vector<int32_t> qpos;      // [nq]
};

// s[qi][t] = qs[qi] · kt[:, t] for t < kKeys.
void tile_scores(const float* qs, const float* kt, float* s, int nq, int D) {
  int qi = 0;
#if AGENTKV_AVX2
  static_assert(kKeys == 32, "the AVX2 path holds one tile row in four registers");
  for (; qi + 2 <= nq; qi += 2) {
    const float* qa = qs + qi * D;
    const float* qb = qa + D;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    for (int d = 0; d < D; ++d) {
      const float* kr = kt + d * kKeys;
      __m256 k0 = _mm256_loadu_ps(kr), k1 = _mm256_loadu_ps(kr + 8), k2 = _mm256_loadu_ps(kr + 16),
             k3 = _mm256_loadu_ps(kr + 24);
      __m256 x = _mm256_broadcast_ss(qa + d), y = _mm256_broadcast_ss(qb + d);
      a0 = _mm256_fmadd_ps(x, k0, a0), a1 = _mm256_fmadd_ps(x, k1, a1);
      a2 = _mm256_fmadd_ps(x, k2, a2), a3 = _mm256_fmadd_ps(x, k3, a3);
      b0 = _mm256_fmadd_ps(y, k0, b0), b1 = _mm256_fmadd_ps(y, k1, b1);
      b2 = _mm256_fmadd_ps(y, k2, b2), b3 = _mm256_fmadd_ps(y, k3, b3);
    }
    float* sa = s + qi * kKeys;
    float* sb = sa + kKeys;
    _mm256_storeu_ps(sa, a0), _mm256_storeu_ps(sa + 8, a1), _mm256_storeu_ps(sa + 16, a2);
    _mm256_storeu_ps(sa + 24, a3);
    _mm256_storeu_ps(sb, b0), _mm256_storeu_ps(sb + 8, b1), _mm256_storeu_ps(sb + 16, b2);
    _mm256_storeu_ps(sb + 24, b3);
  }
#endif
  for (; qi < nq; ++qi) {
    float* sr = s + qi * kKeys;
    for (int t = 0; t < kKeys; ++t) sr[t] = 0.0f;
    for (int d = 0; d < D; ++d) {
      float qd = qs[qi * D + d];
      const float* kr = kt + d * kKeys;
      for (int t = 0; t < kKeys; ++t) sr[t] += qd * kr[t];
    }
  }
}

// acc[0..D) += sum_{t < n} p[t] * v[t][0..D)
void accumulate_pv(float* acc, const float* p, const float* const* v, int n, int D) {
  int d = 0;
#if AGENTKV_AVX2
  for (; d + 32 <= D; d += 32) {
    __m256 a0 = _mm256_loadu_ps(acc + d), a1 = _mm256_loadu_ps(acc + d + 8), a2 = _mm256_loadu_ps(acc + d + 16),
           a3 = _mm256_loadu_ps(acc + d + 24);
    for (int t = 0; t < n; ++t) {
      __m256 pt = _mm256_broadcast_ss(p + t);
      const float* vr = v[t] + d;
      a0 = _mm256_fmadd_ps(pt, _mm256_loadu_ps(vr), a0);
      a1 = _mm256_fmadd_ps(pt, _mm256_loadu_ps(vr + 8), a1);
      a2 = _mm256_fmadd_ps(pt, _mm256_loadu_ps(vr + 16), a2);
      a3 = _mm256_fmadd_ps(pt, _mm256_loadu_ps(vr + 24), a3);
    }
    _mm256_storeu_ps(acc + d, a0), _mm256_storeu_ps(acc + d + 8, a1);
    _mm256_storeu_ps(acc + d + 16, a2), _mm256_storeu_ps(acc + d + 24, a3);
  }
  for (; d + 8 <= D; d += 8) {
    __m256 a = _mm256_loadu_ps(acc + d);
    for (int t = 0; t < n; ++t) a = _mm256_fmadd_ps(_mm256_broadcast_ss(p + t), _mm256_loadu_ps(v[t] + d), a);
    _mm256_storeu_ps(acc + d, a);
  }
#endif
  for (; d < D; ++d) {
    float a = acc[d];
    for (int t = 0; t < n; ++t) a += p[t] * v[t][d];
    acc[d] = a;
  }
}

void run_item(const Item& it, const AttentionPlan& plan, const float* q, int32_t n_heads, const KvLayerView& kv,
              float scale, float* out, Scratch& sc) {
  const int D = kv.head_dim;
  const int64_t width = int64_t(kv.kv_heads) * D;
  const int nh = it.h1 - it.h0;
  const int nq = (it.r1 - it.r0) * nh;
  sc.qs.resize(size_t(nq) * D);
  sc.kt.resize(size_t(D) * kKeys);
  sc.vp.resize(kKeys);
  sc.s.resize(size_t(nq) * kKeys);
  sc.acc.assign(size_t(nq) * D, 0.0f);
  sc.m.assign(nq, -std::numeric_limits<float>::infinity());
  sc.l.assign(nq, 0.0f);
  sc.qpos.resize(nq);
  int32_t pmax = 0;
  for (int qi = 0; qi < nq; ++qi) {
    int32_t r = it.r0 + qi / nh;
    int32_t h = it.h0 + qi % nh;
    sc.qpos[qi] = plan.row_pos[r];
    pmax = std::max(pmax, sc.qpos[qi]);
    const float* qr = q + (int64_t(r) * n_heads + h) * D;
    for (int d = 0; d < D; ++d) sc.qs[qi * D + d] = qr[d] * scale;
  }
  const int32_t* blocks = plan.block_ids + plan.block_indptr[it.seq];
  const int32_t bs = kv.block_size;
  for (int32_t j0 = 0; j0 <= pmax; j0 += kKeys) {
    const int tn = std::min<int32_t>(kKeys, pmax + 1 - j0);
    for (int t = 0; t < tn; ++t) {
      int32_t j = j0 + t;
      int64_t off = int64_t(blocks[j / bs]) * kv.block_stride + int64_t(j % bs) * width + int64_t(it.kvh) * D;
      const float* kp = kv.k + off;
      sc.vp[t] = kv.v + off;
      for (int d = 0; d < D; ++d) sc.kt[d * kKeys + t] = kp[d];
    }
    for (int t = tn; t < kKeys; ++t)
      for (int d = 0; d < D; ++d) sc.kt[d * kKeys + t] = 0.0f;
    tile_scores(sc.qs.data(), sc.kt.data(), sc.s.data(), nq, D);
    for (int qi = 0; qi < nq; ++qi) {
      if (sc.qpos[qi] < j0) continue;  // every key of the tile is in its future
      const int valid = std::min(tn, sc.qpos[qi] - j0 + 1);
      float* p = &sc.s[size_t(qi) * kKeys];
      float mx = p[0];
      for (int t = 1; t < valid; ++t) mx = std::max(mx, p[t]);
      const float m_new = std::max(sc.m[qi], mx);
      for (int t = 0; t < valid; ++t) p[t] -= m_new;
      cpu::exp_inplace(p, valid);
      float sum = 0.0f;
      for (int t = 0; t < valid; ++t) sum += p[t];
      float* acc = &sc.acc[size_t(qi) * D];
      if (sc.m[qi] != m_new) {
        const float corr = std::exp(sc.m[qi] - m_new);  // 0 on the first tile (m = -inf)
        sc.l[qi] *= corr;
        for (int d = 0; d < D; ++d) acc[d] *= corr;
      }
      sc.l[qi] += sum;
      sc.m[qi] = m_new;
      accumulate_pv(acc, p, sc.vp.data(), valid, D);
    }
  }
  for (int qi = 0; qi < nq; ++qi) {
    int32_t r = it.r0 + qi / nh;
    int32_t h = it.h0 + qi % nh;
    float* o = out + (int64_t(r) * n_heads + h) * D;
    const float inv = 1.0f / sc.l[qi];
    for (int d = 0; d < D; ++d) o[d] = sc.acc[size_t(qi) * D + d] * inv;
  }
}

}  // namespace

void CpuBackend::attention(const AttentionPlan& plan, const float* q, int32_t n_heads, const KvLayerView& kv,
                           float scale, float* out) {
  const int32_t group = n_heads / kv.kv_heads;  // query heads per kv head
  // Split the heads of a group over items only when whole groups would leave
  // threads idle (a decode step of one sequence).
  auto count_items = [&](int32_t heads_per_item) {
    int64_t rows_per_item = std::max(1, kQueries / heads_per_item), n = 0;
    for (int32_t s = 0; s < plan.n_seqs; ++s) {
      int64_t rows = plan.row_indptr[s + 1] - plan.row_indptr[s];
      n += (rows + rows_per_item - 1) / rows_per_item;
    }
    return n * kv.kv_heads * (group / heads_per_item);
  };
  const int32_t heads_per_item = count_items(group) >= 2 * pool_.size() ? group : 1;
  const int32_t rows_per_item = std::max(1, kQueries / heads_per_item);

  std::vector<Item> items;
  for (int32_t s = 0; s < plan.n_seqs; ++s) {
    for (int32_t r0 = plan.row_indptr[s]; r0 < plan.row_indptr[s + 1]; r0 += rows_per_item) {
      int32_t r1 = std::min(plan.row_indptr[s + 1], r0 + rows_per_item);
      int32_t pmax = 0;
      for (int32_t r = r0; r < r1; ++r) pmax = std::max(pmax, plan.row_pos[r]);
      int64_t cost = int64_t(pmax + 1) * (r1 - r0);
      for (int32_t kvh = 0; kvh < kv.kv_heads; ++kvh)
        for (int32_t h0 = kvh * group; h0 < (kvh + 1) * group; h0 += heads_per_item)
          items.push_back({s, r0, r1, kvh, h0, h0 + heads_per_item, cost});
    }
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.cost > b.cost; });

  std::atomic<int64_t> next{0};
  const int64_t n_items = int64_t(items.size());
  auto worker = [&](int64_t, int64_t, int) {
    Scratch sc;
    for (int64_t i = next.fetch_add(1); i < n_items; i = next.fetch_add(1))
      run_item(items[i], plan, q, n_heads, kv, scale, out, sc);
  };
  if (pool_.size() == 1 || n_items <= 1) {
    worker(0, 1, 0);
  } else {
    pool_.parallel_for(std::min<int64_t>(pool_.size(), n_items), worker);
  }
}

}  // namespace agentkv
