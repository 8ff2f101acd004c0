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
//
// Long rows are split along the keys (flash-decoding): keys fall in fixed
// chunks of kChunkKeys positions, and a work unit is (item, chunk). A row
// whose position reaches past the first chunk gets one partial (running max,
// sum, unnormalised output) per chunk it sees, merged in chunk order once all
// are done. The chunks are absolute key ranges, so how a row is reduced
// depends on its position only, never on the thread count or the other rows
// (batch invariance); a row inside the first chunk is reduced exactly as
// without the split. A single long decode thus spreads over every thread.
//
// A sliding window (AttentionPlan::window) starts each row's keys at
// attention_key_begin(pos): the chunks and tiles wholly before every row of
// an item are never visited, a row's keys before its own start are masked
// (-inf before the softmax, as the tile's tail past the row's position), and
// a tile wholly before it adds zeros (its probabilities are set to 0 and its
// running max and sum are left alone). Which tiles a row adds to thus still
// depends on its own position only.
//
// Flash-LoRA-Attention (AttentionPlan::lr, LRAgent Alg. 1): a sequence with
// a low-rank V part keeps a second accumulator of the LR rows' width under
// the same probabilities and rescales, and adds scale · acc_lr · B_h^T to
// the output before the division by the softmax sum. The expand reference
// path instead materialises V_base + scale · V_lr · B^T for the sequence's
// keys once and attends over it.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/cpu/attention_wide.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kv_convert.h"
#include "backend/cpu/simd.h"

namespace agentkv {

namespace {

constexpr int kKeys = 32;     // keys per tile
constexpr int kQueries = 48;  // query vectors per work item, when rows allow
// Keys per chunk (a multiple of kKeys): 512 keys of one kv head are 128 KiB
// of f32 K and V, a few hundred microseconds of work.
constexpr int32_t kChunkKeys = 512;
static_assert(kChunkKeys % kKeys == 0, "chunks are whole tiles");
static_assert(kKeys == cpu::kWideTileKeys, "the 512-bit tile kernels take tiles of the same width");

struct Item {
  int32_t seq, r0, r1;  // rows [r0, r1) of sequence seq
  int32_t kvh, h0, h1;  // kv head and query heads [h0, h1)
  int32_t pmax;         // the last key any of its rows sees
  int32_t kmin;         // the first key any of its rows sees (0 without a window)
  int32_t n_chunks;     // pmax / kChunkKeys + 1
  bool colsums;         // some row has a colsum slot (AttentionPlan::colsum_slot)
  int64_t part;         // > 1 chunk: offset of its partials in CpuBackend::attn_part_
  int64_t hist;         // > 1 chunk with column sums: offset of its tile probabilities in attn_hist_
};

// A share of one item's keys: chunk c covers positions [c, c + 1) * kChunkKeys.
struct Unit {
  int32_t item, chunk;
  int64_t cost;
};

// Floats of one chunk's partial per query vector: m, l, acc[D], acc_lr[R].
inline int64_t part_floats(int D, int R) { return 2 + int64_t(D) + R; }

struct Scratch {
  std::vector<float> qs;         // [nq, D] scaled queries
  std::vector<float> kt;         // [D, kKeys] key tile, transposed
  std::vector<const float*> kp;  // [kKeys] key rows of the tile
  std::vector<const float*> vp;  // [kKeys] value rows of the tile
  // An f16/bf16 cache: the tile's K and V rows of the item's kv head, read
  // in place (k16, v16); where V comes expanded (the LR expand path), the K
  // rows are widened to f32 once (kw) instead.
  std::vector<const uint16_t*> k16, v16;  // [kKeys]
  std::vector<float> kw;         // [kKeys, D]
  std::vector<float> s;          // [nq, kKeys] scores, then probabilities
  std::vector<float> acc;        // [nq, D] unnormalised output
  std::vector<float> m, l;       // [nq] running max and sum
  std::vector<int32_t> qpos;     // [nq]
  std::vector<int32_t> qlo;      // [nq] the first key each query sees (sliding window)
  // Column sums (AttentionPlan::colsum): the probabilities of each tile as
  // softmax_tile left them, and the running max they are relative to.
  std::vector<float> hist;       // [nq, keys]
  std::vector<float> hist_m;     // [nq, tiles]
  // Flash-LoRA-Attention: the tile's LR rows and the low-rank accumulator.
  std::vector<const float*> lp;      // [kKeys] the tile's LR rows, f32 cache
  std::vector<const uint16_t*> l16;  // [kKeys] the same, f16/bf16 cache (read in place)
  std::vector<float> acc_lr;     // [nq, rank] unnormalised P·V_lr
};

// One sequence's low-rank V part, resolved from the plan for run_item.
struct SeqLr {
  const float* b = nullptr;      // (kv_dim, rank) or null: no LR part
  const int32_t* blocks = nullptr;
  int32_t rank = 0;
  float scale = 0.0f;
  const float* vexp = nullptr;   // expand path: [n_keys, kv_dim] V rows already expanded
  // The low-rank accumulator rides along (the expand path has folded the LR
  // rows into vexp instead).
  bool fused() const { return b != nullptr && vexp == nullptr; }
};
const SeqLr kNoLr;

// Readers of K/V rows as f32, eight lanes at a time or one element: the
// attention loops read an f16/bf16 cache through these directly (kv_to_f32's
// own conversions, so the result is the same as over a widened copy).
struct LoadF32 {
  using T = float;
  static float at(const float* p) { return *p; }
#if AGENTKV_AVX2
  static __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
#endif
};
struct LoadF16 {
  using T = uint16_t;
  static float at(const uint16_t* p) { return fp16_to_f32(*p); }
#if AGENTKV_AVX2
  static __m256 load8(const uint16_t* p) { return cpu::f16x8_to_f32(p); }
#endif
};
struct LoadBF16 {
  using T = uint16_t;
  static float at(const uint16_t* p) { return bf16_to_f32(*p); }
#if AGENTKV_AVX2
  static __m256 load8(const uint16_t* p) { return cpu::bf16x8_to_f32(p); }
#endif
};

// kt[d][t] = k[t][d] for t < n, 0 for n <= t < kKeys. Full 8x8 blocks are
// transposed in registers: element-wise, the strided stores cost as much as
// all of q·K.
// Keys before `from` are laid out already (wide_keys_transposed).
template <class L = LoadF32>
void gather_keys_transposed(const typename L::T* const* k, int n, int D, float* kt, int from = 0) {
  int t0 = from;
#if AGENTKV_AVX2
  if (D % 8 == 0) {
    for (; t0 + 8 <= n; t0 += 8) {
      for (int d0 = 0; d0 < D; d0 += 8) {
        __m256 r0 = L::load8(k[t0 + 0] + d0), r1 = L::load8(k[t0 + 1] + d0),
               r2 = L::load8(k[t0 + 2] + d0), r3 = L::load8(k[t0 + 3] + d0),
               r4 = L::load8(k[t0 + 4] + d0), r5 = L::load8(k[t0 + 5] + d0),
               r6 = L::load8(k[t0 + 6] + d0), r7 = L::load8(k[t0 + 7] + d0);
        __m256 u0 = _mm256_unpacklo_ps(r0, r1), u1 = _mm256_unpackhi_ps(r0, r1);
        __m256 u2 = _mm256_unpacklo_ps(r2, r3), u3 = _mm256_unpackhi_ps(r2, r3);
        __m256 u4 = _mm256_unpacklo_ps(r4, r5), u5 = _mm256_unpackhi_ps(r4, r5);
        __m256 u6 = _mm256_unpacklo_ps(r6, r7), u7 = _mm256_unpackhi_ps(r6, r7);
        __m256 s0 = _mm256_shuffle_ps(u0, u2, 0x44), s1 = _mm256_shuffle_ps(u0, u2, 0xEE);
        __m256 s2 = _mm256_shuffle_ps(u1, u3, 0x44), s3 = _mm256_shuffle_ps(u1, u3, 0xEE);
        __m256 s4 = _mm256_shuffle_ps(u4, u6, 0x44), s5 = _mm256_shuffle_ps(u4, u6, 0xEE);
        __m256 s6 = _mm256_shuffle_ps(u5, u7, 0x44), s7 = _mm256_shuffle_ps(u5, u7, 0xEE);
        float* o = kt + d0 * kKeys + t0;
        _mm256_storeu_ps(o + 0 * kKeys, _mm256_permute2f128_ps(s0, s4, 0x20));
        _mm256_storeu_ps(o + 1 * kKeys, _mm256_permute2f128_ps(s1, s5, 0x20));
        _mm256_storeu_ps(o + 2 * kKeys, _mm256_permute2f128_ps(s2, s6, 0x20));
        _mm256_storeu_ps(o + 3 * kKeys, _mm256_permute2f128_ps(s3, s7, 0x20));
        _mm256_storeu_ps(o + 4 * kKeys, _mm256_permute2f128_ps(s0, s4, 0x31));
        _mm256_storeu_ps(o + 5 * kKeys, _mm256_permute2f128_ps(s1, s5, 0x31));
        _mm256_storeu_ps(o + 6 * kKeys, _mm256_permute2f128_ps(s2, s6, 0x31));
        _mm256_storeu_ps(o + 7 * kKeys, _mm256_permute2f128_ps(s3, s7, 0x31));
      }
    }
  }
#endif
  for (int t = t0; t < n; ++t)
    for (int d = 0; d < D; ++d) kt[d * kKeys + t] = L::at(k[t] + d);
  for (int t = n; t < kKeys; ++t)
    for (int d = 0; d < D; ++d) kt[d * kKeys + t] = 0.0f;
}

// gather_keys_transposed with its whole groups of 16 keys on 512-bit vectors
// where the chosen ISA has them (attention_wide.h: values only move, so the
// same kt), as pv_heads_any does for P·V.
template <class L>
void keys_transposed_any(bool wide, const typename L::T* const* k, int n, int D, float* kt) {
  int from = 0;
  if (wide) {
    if constexpr (std::is_same_v<L, LoadF32>) {
      from = cpu::wide_keys_transposed(k, n, D, kt);
    } else if constexpr (std::is_same_v<L, LoadF16>) {
      from = cpu::wide_keys_transposed_f16(k, n, D, kt);
    } else {
      from = cpu::wide_keys_transposed_bf16(k, n, D, kt);
    }
  }
  gather_keys_transposed<L>(k, n, D, kt, from);
}

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
  // A last odd query: the same FMA chains as one half of the pair above, so a
  // row's scores do not depend on whether its item had an odd query count.
  for (; qi < nq; ++qi) {
    const float* qa = qs + qi * D;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int d = 0; d < D; ++d) {
      const float* kr = kt + d * kKeys;
      __m256 x = _mm256_broadcast_ss(qa + d);
      a0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(kr), a0), a1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(kr + 8), a1);
      a2 = _mm256_fmadd_ps(x, _mm256_loadu_ps(kr + 16), a2), a3 = _mm256_fmadd_ps(x, _mm256_loadu_ps(kr + 24), a3);
    }
    float* sa = s + qi * kKeys;
    _mm256_storeu_ps(sa, a0), _mm256_storeu_ps(sa + 8, a1), _mm256_storeu_ps(sa + 16, a2);
    _mm256_storeu_ps(sa + 24, a3);
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
template <class L = LoadF32>
void accumulate_pv(float* acc, const float* p, const typename L::T* const* v, int n, int D) {
  int d = 0;
#if AGENTKV_AVX2
  // Eight independent accumulators: with four, the loop waits on FMA latency.
  for (; d + 64 <= D; d += 64) {
    __m256 a[8];
    for (int i = 0; i < 8; ++i) a[i] = _mm256_loadu_ps(acc + d + 8 * i);
    for (int t = 0; t < n; ++t) {
      __m256 pt = _mm256_broadcast_ss(p + t);
      const typename L::T* vr = v[t] + d;
      for (int i = 0; i < 8; ++i) a[i] = _mm256_fmadd_ps(pt, L::load8(vr + 8 * i), a[i]);
    }
    for (int i = 0; i < 8; ++i) _mm256_storeu_ps(acc + d + 8 * i, a[i]);
  }
  for (; d + 32 <= D; d += 32) {
    __m256 a0 = _mm256_loadu_ps(acc + d), a1 = _mm256_loadu_ps(acc + d + 8),
           a2 = _mm256_loadu_ps(acc + d + 16), a3 = _mm256_loadu_ps(acc + d + 24);
    for (int t = 0; t < n; ++t) {
      __m256 pt = _mm256_broadcast_ss(p + t);
      const typename L::T* vr = v[t] + d;
      a0 = _mm256_fmadd_ps(pt, L::load8(vr), a0);
      a1 = _mm256_fmadd_ps(pt, L::load8(vr + 8), a1);
      a2 = _mm256_fmadd_ps(pt, L::load8(vr + 16), a2);
      a3 = _mm256_fmadd_ps(pt, L::load8(vr + 24), a3);
    }
    _mm256_storeu_ps(acc + d, a0), _mm256_storeu_ps(acc + d + 8, a1);
    _mm256_storeu_ps(acc + d + 16, a2), _mm256_storeu_ps(acc + d + 24, a3);
  }
  for (; d + 8 <= D; d += 8) {
    __m256 a = _mm256_loadu_ps(acc + d);
    for (int t = 0; t < n; ++t) a = _mm256_fmadd_ps(_mm256_broadcast_ss(p + t), L::load8(v[t] + d), a);
    _mm256_storeu_ps(acc + d, a);
  }
#endif
  for (; d < D; ++d) {
    float a = acc[d];
    for (int t = 0; t < n; ++t) a = std::fma(p[t], L::at(v[t] + d), a);
    acc[d] = a;
  }
}

#if AGENTKV_AVX2
// accumulate_pv for Q queries at once, 32 columns at a time: each V vector
// is loaded (and widened) once and feeds Q FMA chains. Every acc element
// sums fma(p[t], v[t][d], acc) in key order, as accumulate_pv does.
//
// NL > 0 (Flash-LoRA-Attention at rank 8 * NL): the pass over columns 0-31
// also takes each key's LR row l[t] (NL vectors) into the Q rank-r
// accumulators acc_lr (rows 8 * NL apart), under the same broadcast
// probability, so the second accumulator costs NL loads and Q * NL FMAs per
// key and nothing else. acc_lr sums fma(p[t], l[t][k], acc_lr) in key order.
//
// pv_pass and pv_heads (below) are forced inline: out of line, GCC 12 laid out
// run_unit so that plain attention ran 15-45% slower (bench_lora_attention,
// 2026-11-26).
template <class L, int Q, int NL>
[[gnu::always_inline]] inline void pv_pass(float* acc, const float* p, const typename L::T* const* v, int n,
                                           int D, int d, float* acc_lr, const typename L::T* const* l) {
  constexpr int R = 8 * NL;
  __m256 a[Q][4];
  [[maybe_unused]] __m256 b[Q][NL > 0 ? NL : 1];
  for (int q = 0; q < Q; ++q)
    for (int i = 0; i < 4; ++i) a[q][i] = _mm256_loadu_ps(acc + q * D + d + 8 * i);
  if constexpr (NL > 0)
    for (int q = 0; q < Q; ++q)
      for (int k = 0; k < NL; ++k) b[q][k] = _mm256_loadu_ps(acc_lr + q * R + 8 * k);
  for (int t = 0; t < n; ++t) {
    const typename L::T* vr = v[t] + d;
    const __m256 v0 = L::load8(vr), v1 = L::load8(vr + 8), v2 = L::load8(vr + 16), v3 = L::load8(vr + 24);
    [[maybe_unused]] __m256 w[NL > 0 ? NL : 1];
    if constexpr (NL > 0)
      for (int k = 0; k < NL; ++k) w[k] = L::load8(l[t] + 8 * k);
    for (int q = 0; q < Q; ++q) {
      const __m256 pt = _mm256_broadcast_ss(p + q * kKeys + t);
      a[q][0] = _mm256_fmadd_ps(pt, v0, a[q][0]);
      a[q][1] = _mm256_fmadd_ps(pt, v1, a[q][1]);
      a[q][2] = _mm256_fmadd_ps(pt, v2, a[q][2]);
      a[q][3] = _mm256_fmadd_ps(pt, v3, a[q][3]);
      if constexpr (NL > 0)
        for (int k = 0; k < NL; ++k) b[q][k] = _mm256_fmadd_ps(pt, w[k], b[q][k]);
    }
  }
  for (int q = 0; q < Q; ++q)
    for (int i = 0; i < 4; ++i) _mm256_storeu_ps(acc + q * D + d + 8 * i, a[q][i]);
  if constexpr (NL > 0)
    for (int q = 0; q < Q; ++q)
      for (int k = 0; k < NL; ++k) _mm256_storeu_ps(acc_lr + q * R + 8 * k, b[q][k]);
}

template <class L, int Q, int NL = 0>
[[gnu::always_inline]] inline void pv_heads(float* acc, const float* p, const typename L::T* const* v, int n,
                                            int D, float* acc_lr = nullptr,
                                            const typename L::T* const* l = nullptr) {
  pv_pass<L, Q, NL>(acc, p, v, n, D, 0, acc_lr, l);
  for (int d = 32; d < D; d += 32) pv_pass<L, Q, 0>(acc, p, v, n, D, d, nullptr, nullptr);
}
#endif

// accumulate_pv for nq queries sharing their keys: acc rows D apart, p rows
// kKeys apart. The same arithmetic per element as one call per query.
template <class L>
void accumulate_pv_heads(float* acc, const float* p, const typename L::T* const* v, int n, int D, int nq) {
  int q = 0;
#if AGENTKV_AVX2
  if (D % 32 == 0) {
    for (; q + 3 <= nq; q += 3) pv_heads<L, 3>(acc + q * D, p + q * kKeys, v, n, D);
    for (; q < nq; ++q) pv_heads<L, 1>(acc + q * D, p + q * kKeys, v, n, D);
  }
#endif
  for (; q < nq; ++q) accumulate_pv<L>(acc + q * D, p + q * kKeys, v, n, D);
}

// accumulate_pv_heads on 512-bit vectors where the chosen ISA has them
// (attention_wide.h: the same chains, so the same bits), else as above.
template <class L>
void pv_heads_any(bool wide, float* acc, const float* p, const typename L::T* const* v, int n, int D,
                  int nq) {
  if (wide && D % 32 == 0) {
    if constexpr (std::is_same_v<L, LoadF32>) {
      return cpu::wide_pv_heads(acc, p, v, n, D, nq);
    } else if constexpr (std::is_same_v<L, LoadF16>) {
      return cpu::wide_pv_heads_f16(acc, p, v, n, D, nq);
    } else {
      return cpu::wide_pv_heads_bf16(acc, p, v, n, D, nq);
    }
  }
  accumulate_pv_heads<L>(acc, p, v, n, D, nq);
}

// accumulate_pv_heads plus Flash-LoRA-Attention's accumulator in the same
// pass over the keys, for the ranks pv_heads takes along (8 and 16, the
// LR rows in the V rows' dtype). False: not taken; the caller runs the two
// apart. A query's arithmetic is the same in a group of three or alone.
template <class L>
bool accumulate_pv_lr_heads(float* acc, float* acc_lr, const float* p, const typename L::T* const* v,
                            const typename L::T* const* l, int n, int D, int R, int nq) {
#if AGENTKV_AVX2
  if (D % 32 != 0 || (R != 8 && R != 16)) return false;
  auto run = [&]<int NL>() {
    int q = 0;
    for (; q + 3 <= nq; q += 3) pv_heads<L, 3, NL>(acc + q * D, p + q * kKeys, v, n, D, acc_lr + q * R, l);
    for (; q < nq; ++q) pv_heads<L, 1, NL>(acc + q * D, p + q * kKeys, v, n, D, acc_lr + q * R, l);
  };
  if (R == 8) {
    run.template operator()<1>();
  } else {
    run.template operator()<2>();
  }
  return true;
#else
  (void)acc, (void)acc_lr, (void)p, (void)v, (void)l, (void)n, (void)D, (void)R, (void)nq;
  return false;
#endif
}

// Flash-LoRA-Attention's second accumulator for nq queries sharing their
// keys (the heads of one row), in a pass of its own: acc rows R apart, p
// rows kKeys apart, l the keys' LR rows read in place in the LR cache's
// dtype, each loaded once for all the queries. The arithmetic is pv_pass's
// for its LR columns (one FMA chain per column, in key order, on acc), so a
// query's result is the same whichever of the two passes ran, in a group of
// three or alone.
template <class L, int Q>
void lr_heads(float* acc, const float* p, const typename L::T* const* l, int n, int R) {
#if AGENTKV_AVX2
  for (int d = 0; d + 8 <= R; d += 8) {
    __m256 a[Q];
    for (int q = 0; q < Q; ++q) a[q] = _mm256_loadu_ps(acc + q * R + d);
    for (int t = 0; t < n; ++t) {
      const __m256 w = L::load8(l[t] + d);
      for (int q = 0; q < Q; ++q) a[q] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + q * kKeys + t), w, a[q]);
    }
    for (int q = 0; q < Q; ++q) _mm256_storeu_ps(acc + q * R + d, a[q]);
  }
#else
  (void)acc, (void)p, (void)l, (void)n, (void)R;
#endif
}

template <class L>
void accumulate_lr_heads(float* acc, const float* p, const typename L::T* const* l, int n, int R, int nq) {
  int q = 0;
#if AGENTKV_AVX2
  if (R >= 8) {
    for (; q + 3 <= nq; q += 3) lr_heads<L, 3>(acc + q * R, p + q * kKeys, l, n, R);
    for (; q < nq; ++q) lr_heads<L, 1>(acc + q * R, p + q * kKeys, l, n, R);
  }
  const int d0 = R - R % 8;  // the columns the vector loops did not cover
#else
  const int d0 = 0;
#endif
  for (q = 0; q < nq; ++q) {
    for (int d = d0; d < R; ++d) {
      float a = 0.0f;
      for (int t = 0; t < n; ++t) a += p[q * kKeys + t] * L::at(l[t] + d);
      acc[q * R + d] += a;
    }
  }
}


// Online-softmax step over one tile of scores: keys >= valid are masked,
// m_new = max(m_old, max p[0..valid)), p[t] = exp(p[t] - m_new) (0 when masked),
// sum = sum of p. Fixed width kKeys keeps it in four vector registers.
void softmax_tile(float* p, int valid, float m_old, float* m_new, float* sum) {
#if AGENTKV_AVX2
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 v[4];
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(p + 8 * i);
    if (valid < 8 * (i + 1)) {
      __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(8 * i), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(valid), idx));
      v[i] = _mm256_blendv_ps(ninf, v[i], keep);
    }
  }
  __m256 mx = _mm256_max_ps(_mm256_max_ps(v[0], v[1]), _mm256_max_ps(v[2], v[3]));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
  const float m = std::max(m_old, _mm_cvtss_f32(m4));
  const __m256 mv = _mm256_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = cpu::exp8(_mm256_sub_ps(v[i], mv));  // masked: exp(-inf) = 0
    acc = _mm256_add_ps(acc, v[i]);
    _mm256_storeu_ps(p + 8 * i, v[i]);
  }
  *m_new = m;
  *sum = cpu::hsum8(acc);
#else
  float m = m_old;
  for (int t = 0; t < valid; ++t) m = std::max(m, p[t]);
  float s = 0.0f;
  for (int t = 0; t < kKeys; ++t) {
    p[t] = t < valid ? std::exp(p[t] - m) : 0.0f;
    s += p[t];
  }
  *m_new = m;
  *sum = s;
#endif
}

// a[d] += scale * (al · bh[d]) for d < D: a query's rank-R accumulator al
// through B_h (D rows of R), the last line of Alg. 1. It runs once per query
// and item, but against a short decode item it is not small (D x R
// multiply-adds), so with AVX2 eight rows at a time: eight products summed
// across their lanes by a tree of horizontal adds into one vector of eight
// dot products.
void add_lr_output(float* a, const float* al, const float* bh, int D, int R, float scale) {
  int d = 0;
#if AGENTKV_AVX2
  if (R % 8 == 0) {
    const __m256 sv = _mm256_set1_ps(scale);
    for (; d + 8 <= D; d += 8) {
      __m256 m[8];
      for (int i = 0; i < 8; ++i) m[i] = _mm256_setzero_ps();
      for (int k = 0; k < R; k += 8) {
        const __m256 x = _mm256_loadu_ps(al + k);
        for (int i = 0; i < 8; ++i)
          m[i] = _mm256_fmadd_ps(x, _mm256_loadu_ps(bh + int64_t(d + i) * R + k), m[i]);
      }
      const __m256 h01 = _mm256_hadd_ps(m[0], m[1]), h23 = _mm256_hadd_ps(m[2], m[3]);
      const __m256 h45 = _mm256_hadd_ps(m[4], m[5]), h67 = _mm256_hadd_ps(m[6], m[7]);
      const __m256 h03 = _mm256_hadd_ps(h01, h23), h47 = _mm256_hadd_ps(h45, h67);
      // h03: rows 0-3's sums over lanes 0-3, then over lanes 4-7; h47 likewise.
      const __m256 dots =
          _mm256_add_ps(_mm256_permute2f128_ps(h03, h47, 0x20), _mm256_permute2f128_ps(h03, h47, 0x31));
      _mm256_storeu_ps(a + d, _mm256_fmadd_ps(sv, dots, _mm256_loadu_ps(a + d)));
    }
  }
#endif
  for (; d < D; ++d) {
    float t = 0.0f;
    for (int k = 0; k < R; ++k) t += al[k] * bh[int64_t(d) * R + k];
    a[d] += scale * t;
  }
}

// Where a unit of a multi-chunk item leaves its results.
struct PartOut {
  float* part = nullptr;  // [n_chunks][nq][part_floats]
  float* hist = nullptr;  // [nq][n_tiles][kKeys] tile probabilities, or null
  float* hist_m = nullptr;  // [nq][n_tiles]
};

// The output rows of an item's query vectors from their (merged) running max
// m, sum l, unnormalised output acc and low-rank accumulator acc_lr; adds the
// column sums first. hist/hist_m: the tile probabilities of the whole item.
void finish_item(const Item& it, const AttentionPlan& plan, int32_t n_heads, const KvLayerView& kv, float* out,
                 const SeqLr& lr, bool lr_acc, const float* m, const float* l, float* acc, const float* acc_lr,
                 const float* hist, const float* hist_m, const int32_t* qpos) {
  const int D = kv.head_dim;
  const int nh = it.h1 - it.h0;
  const int nq = (it.r1 - it.r0) * nh;
  const int R = lr_acc ? lr.rank : 0;
  const int32_t n_tiles = (it.pmax + kKeys) / kKeys;
  if (hist != nullptr) {
    // p_final[j] = p_tile[j] * exp(m_tile - m_final) / l_final, summed over
    // the item's heads of each row into the row's (slot, kv head) line.
    for (int qi = 0; qi < nq; ++qi) {
      const int32_t slot = plan.colsum_slot[it.r0 + qi / nh];
      if (slot < 0) continue;
      float* line = plan.colsum + (int64_t(slot) * kv.kv_heads + it.kvh) * plan.colsum_stride;
      const int32_t k0 = attention_key_begin(qpos[qi], plan.window) / kKeys * kKeys;
      for (int32_t j0 = k0; j0 <= qpos[qi]; j0 += kKeys) {
        const int valid = std::min(kKeys, qpos[qi] - j0 + 1);
        const float f = std::exp(hist_m[size_t(qi) * n_tiles + j0 / kKeys] - m[qi]) / l[qi];
        const float* p = &hist[(size_t(qi) * n_tiles + j0 / kKeys) * kKeys];
        for (int t = 0; t < valid; ++t) line[j0 + t] += p[t] * f;
      }
    }
  }
  for (int qi = 0; qi < nq; ++qi) {
    int32_t r = it.r0 + qi / nh;
    int32_t h = it.h0 + qi % nh;
    float* o = out + (int64_t(r) * n_heads + h) * D;
    const float inv = 1.0f / l[qi];
    float* a = acc + size_t(qi) * D;
    if (lr_acc) {
      // O += scale · acc_lr · B_h^T (Alg. 1, line 12), before the division.
      add_lr_output(a, acc_lr + size_t(qi) * R, lr.b + int64_t(it.kvh) * D * R, D, R, lr.scale);
    }
    for (int d = 0; d < D; ++d) o[d] = a[d] * inv;
  }
}

// Keys [chunk * kChunkKeys, ...] of one item. A single-chunk item is finished
// here; otherwise the unit's partials go to po.
void run_unit(const Item& it, int32_t chunk, const AttentionPlan& plan, const float* q, int32_t n_heads,
              const KvLayerView& kv, float scale, float* out, Scratch& sc, const SeqLr& lr, const PartOut& po) {
  const int D = kv.head_dim;
  const int64_t width = int64_t(kv.kv_heads) * D;
  const int nh = it.h1 - it.h0;
  const int nq = (it.r1 - it.r0) * nh;
  const bool wide = cpu::attention_wide();
  sc.qs.resize(size_t(nq) * D);
  sc.kt.resize(size_t(D) * kKeys);
  sc.kp.resize(kKeys);
  sc.vp.resize(kKeys);
  sc.s.resize(size_t(nq) * kKeys);
  sc.acc.assign(size_t(nq) * D, 0.0f);
  sc.m.assign(nq, -std::numeric_limits<float>::infinity());
  sc.l.assign(nq, 0.0f);
  sc.qpos.resize(nq);
  sc.qlo.resize(nq);
  for (int qi = 0; qi < nq; ++qi) {
    int32_t r = it.r0 + qi / nh;
    int32_t h = it.h0 + qi % nh;
    sc.qpos[qi] = plan.row_pos[r];
    sc.qlo[qi] = attention_key_begin(plan.row_pos[r], plan.window);
    const float* qr = q + (int64_t(r) * n_heads + h) * D;
    for (int d = 0; d < D; ++d) sc.qs[qi * D + d] = qr[d] * scale;
  }
  const int32_t* blocks = plan.block_ids + plan.block_indptr[it.seq];
  const int32_t bs = kv.block_size;
  const bool colsums = it.colsums;
  const int32_t n_tiles = (it.pmax + kKeys) / kKeys;
  const bool single = it.n_chunks == 1;
  const bool lr_acc = lr.fused();
  const int R = lr_acc ? lr.rank : 0;
  if (lr_acc) {
    sc.lp.resize(kKeys);
    sc.l16.resize(kKeys);
    sc.acc_lr.assign(size_t(nq) * R, 0.0f);
  }
  // Tile probabilities for the column sums: the item's own scratch, or the
  // shared per-item buffer when its chunks run as separate units.
  float* hist = nullptr;
  float* hist_m = nullptr;
  if (colsums && single) {
    sc.hist.resize(size_t(nq) * size_t(n_tiles) * kKeys);
    sc.hist_m.resize(size_t(nq) * size_t(n_tiles));
    hist = sc.hist.data(), hist_m = sc.hist_m.data();
  } else if (colsums) {
    hist = po.hist, hist_m = po.hist_m;
  }
  const bool widen = kv.dtype != KvDType::kF32;
  // A half cache is read in place by the loops below, unless V comes expanded.
  const bool in_place = widen && lr.vexp == nullptr;
  if (in_place) {
    sc.k16.resize(kKeys);
    sc.v16.resize(kKeys);
  } else if (widen) {
    sc.kw.resize(size_t(kKeys) * D);
  }
  const bool bf16 = kv.dtype == KvDType::kBF16;
  const int64_t row_bytes = int64_t(D) * kv_dtype_bytes(kv.dtype);
  // (kmin's tile: chunks start on tile boundaries.)
  const int32_t k_begin = std::max(chunk * kChunkKeys, it.kmin / kKeys * kKeys);
  const int32_t k_last = std::min(it.pmax, chunk * kChunkKeys + kChunkKeys - 1);
  // Key j lives in block blocks[j / bs], slot j % bs: the tile's keys are
  // walked a block's run at a time (consecutive slots are `width` apart),
  // with one division per run instead of per key.
  const int64_t head_off = int64_t(it.kvh) * D;
  for (int32_t j0 = k_begin; j0 <= k_last; j0 += kKeys) {
    const int tn = std::min<int32_t>(kKeys, k_last + 1 - j0);
#if AGENTKV_AVX2
    // The next tile's K and V rows: at decode they come from memory (the
    // weights streamed in between evict them), and the rows of one head are
    // strided by the other heads' rows.
    // The first kv head's item takes every head's bytes of those rows (a
    // key's rows of all heads are contiguous): its chunk's other kv heads
    // run next (the unit order below) and find them in cache, so memory is
    // read in whole rows, not 128 of every 384 bytes three times over.
    const int32_t next_last = std::min(k_last, j0 + 2 * kKeys - 1);
    const int64_t step = width * int64_t(kv_dtype_bytes(kv.dtype));
    const int64_t pf_bytes = it.kvh == 0 ? step : row_bytes;
    const int64_t pf_off = it.kvh == 0 ? 0 : head_off;
    for (int32_t j = j0 + kKeys; j <= next_last;) {
      const int32_t s0 = j % bs, n = std::min(bs - s0, next_last + 1 - j);
      const int64_t on = int64_t(blocks[j / bs]) * kv.block_stride + int64_t(s0) * width + pf_off;
      const char* kn = static_cast<const char*>(cpu::kv_elem(kv.k, kv.dtype, on));
      const char* vn = static_cast<const char*>(cpu::kv_elem(kv.v, kv.dtype, on));
      // (Offsets from the run's first row: no pointer is formed past its last.)
      for (int u = 0; u < n; ++u)
        for (int64_t b = u * step; b < u * step + pf_bytes; b += 64) {
          _mm_prefetch(kn + b, _MM_HINT_T0);
          _mm_prefetch(vn + b, _MM_HINT_T0);
        }
      j += n;
    }
#endif
    // (The scratch's pointers held in locals: stores through them could
    // alias the vectors' own, which GCC then reloads per key.)
    const float** kp = sc.kp.data();
    const float** vp = sc.vp.data();
    const uint16_t** k16 = sc.k16.data();
    const uint16_t** v16 = sc.v16.data();
    for (int t = 0; t < tn;) {
      const int32_t s0 = (j0 + t) % bs, n = std::min(bs - s0, tn - t);
      int64_t off = int64_t(blocks[(j0 + t) / bs]) * kv.block_stride + int64_t(s0) * width + head_off;
      if (in_place) {
        const uint16_t* k = static_cast<const uint16_t*>(kv.k) + off;
        const uint16_t* v = static_cast<const uint16_t*>(kv.v) + off;
        for (int u = 0; u < n; ++u) k16[t + u] = k + u * width, v16[t + u] = v + u * width;
        t += n;
        continue;
      }
      for (const int t1 = t + n; t < t1; ++t, off += width) {
        if (!widen) {
          kp[t] = static_cast<const float*>(kv.k) + off;
          vp[t] = static_cast<const float*>(kv.v) + off;
        } else {
          float* kr = &sc.kw[size_t(t) * D];
          cpu::kv_to_f32(kv.dtype, cpu::kv_elem(kv.k, kv.dtype, off), kr, D);
          kp[t] = kr;  // V: lr.vexp, below
        }
        if (lr.vexp != nullptr) vp[t] = lr.vexp + int64_t(j0 + t) * width + int64_t(it.kvh) * D;
      }
    }
    if (lr_acc) {
      // The tile's LR rows, a block's run at a time.
      const LrAttention& la = *plan.lr;
      for (int t = 0; t < tn;) {
        const int32_t j = j0 + t;
        const int n = std::min<int>(bs - j % bs, tn - t);
        const int64_t e = int64_t(lr.blocks[j / bs]) * la.block_stride + int64_t(j % bs) * la.width;
        if (la.dtype == KvDType::kF32) {
          const float* r = static_cast<const float*>(la.lr) + e;
          for (int u = 0; u < n; ++u) sc.lp[t + u] = r + int64_t(u) * la.width;
        } else {
          const uint16_t* r = static_cast<const uint16_t*>(la.lr) + e;
          for (int u = 0; u < n; ++u) sc.l16[t + u] = r + int64_t(u) * la.width;
        }
        t += n;
      }
    }
    if (!in_place) {
      keys_transposed_any<LoadF32>(wide, sc.kp.data(), tn, D, sc.kt.data());
    } else if (bf16) {
      keys_transposed_any<LoadBF16>(wide, sc.k16.data(), tn, D, sc.kt.data());
    } else {
      keys_transposed_any<LoadF16>(wide, sc.k16.data(), tn, D, sc.kt.data());
    }
    if (wide) {
      cpu::wide_tile_scores(sc.qs.data(), sc.kt.data(), sc.s.data(), nq, D);
    } else {
      tile_scores(sc.qs.data(), sc.kt.data(), sc.s.data(), nq, D);
    }
    for (int qi = 0; qi < nq; ++qi) {
      if (sc.qpos[qi] < j0) continue;  // every key of the tile is in its future
      const int valid = std::min(tn, sc.qpos[qi] - j0 + 1);
      float* p = &sc.s[size_t(qi) * kKeys];
      if (const int masked = sc.qlo[qi] - j0; masked > 0) {  // keys before the row's window
        if (masked >= valid) {
          std::fill(p, p + valid, 0.0f);  // all of them: P·V below adds zeros
          continue;
        }
        std::fill(p, p + masked, -std::numeric_limits<float>::infinity());
      }
      float m_new, sum;
      if (wide) {
        cpu::wide_softmax_tile(p, valid, sc.m[qi], &m_new, &sum);
      } else {
        softmax_tile(p, valid, sc.m[qi], &m_new, &sum);
      }
      float* acc = &sc.acc[size_t(qi) * D];
      float* acc_lr = lr_acc ? &sc.acc_lr[size_t(qi) * R] : nullptr;
      if (sc.m[qi] != m_new) {
        const float corr = std::exp(sc.m[qi] - m_new);  // 0 on the first tile (m = -inf)
        sc.l[qi] *= corr;
        for (int d = 0; d < D; ++d) acc[d] *= corr;
        for (int k = 0; k < R; ++k) acc_lr[k] *= corr;
      }
      sc.l[qi] += sum;
      sc.m[qi] = m_new;
      if (colsums) {
        std::copy(p, p + valid, &hist[(size_t(qi) * n_tiles + j0 / kKeys) * kKeys]);
        hist_m[size_t(qi) * n_tiles + j0 / kKeys] = m_new;
      }
    }
    // P·V for the heads of one row together (they share the row's keys):
    // each V row is read and widened once for all of them. Under
    // Flash-LoRA-Attention the LR rows ride along in the same pass where
    // their rank and dtype allow, and get their own pass otherwise.
    // Without the LR accumulator, consecutive rows that see the same keys of
    // the tile (all of them, below the causal diagonal) go in one call, so
    // each V row is also shared across rows: every query keeps its own chain
    // in key order, so its bits do not depend on the grouping.
    const KvDType lr_dtype = lr_acc ? plan.lr->dtype : kv.dtype;
    for (int qi = 0, span = nh; qi < nq; qi += span) {
      span = nh;
      if (sc.qpos[qi] < j0) continue;
      const int valid = std::min(tn, sc.qpos[qi] - j0 + 1);
      if (!lr_acc)
        while (qi + span < nq && std::min(tn, sc.qpos[qi + span] - j0 + 1) == valid) span += nh;
      float* acc = &sc.acc[size_t(qi) * D];
      float* acc_lr = lr_acc ? &sc.acc_lr[size_t(qi) * R] : nullptr;
      const float* p = &sc.s[size_t(qi) * kKeys];
      bool together = false;  // the LR rows went with the V rows
      if (!in_place) {
        together =
            lr_acc && lr_dtype == KvDType::kF32 &&
            accumulate_pv_lr_heads<LoadF32>(acc, acc_lr, p, sc.vp.data(), sc.lp.data(), valid, D, R, nh);
        if (!together) pv_heads_any<LoadF32>(wide, acc, p, sc.vp.data(), valid, D, span);
      } else if (bf16) {
        together =
            lr_acc && lr_dtype == KvDType::kBF16 &&
            accumulate_pv_lr_heads<LoadBF16>(acc, acc_lr, p, sc.v16.data(), sc.l16.data(), valid, D, R, nh);
        if (!together) pv_heads_any<LoadBF16>(wide, acc, p, sc.v16.data(), valid, D, span);
      } else {
        together =
            lr_acc && lr_dtype == KvDType::kF16 &&
            accumulate_pv_lr_heads<LoadF16>(acc, acc_lr, p, sc.v16.data(), sc.l16.data(), valid, D, R, nh);
        if (!together) pv_heads_any<LoadF16>(wide, acc, p, sc.v16.data(), valid, D, span);
      }
      if (!lr_acc || together) continue;
      // Flash-LoRA-Attention's second accumulator, in a pass of its own.
      if (lr_dtype == KvDType::kF32) {
        accumulate_lr_heads<LoadF32>(acc_lr, p, sc.lp.data(), valid, R, nh);
      } else if (lr_dtype == KvDType::kBF16) {
        accumulate_lr_heads<LoadBF16>(acc_lr, p, sc.l16.data(), valid, R, nh);
      } else {
        accumulate_lr_heads<LoadF16>(acc_lr, p, sc.l16.data(), valid, R, nh);
      }
    }
  }
  if (single) {
    finish_item(it, plan, n_heads, kv, out, lr, lr_acc, sc.m.data(), sc.l.data(), sc.acc.data(), sc.acc_lr.data(),
                hist, hist_m, sc.qpos.data());
    return;
  }
  const int64_t pf = part_floats(D, R);
  float* part = po.part + int64_t(chunk) * nq * pf;
  for (int qi = 0; qi < nq; ++qi) {
    float* pq = part + qi * pf;
    pq[0] = sc.m[qi];
    pq[1] = sc.l[qi];
    std::copy_n(&sc.acc[size_t(qi) * D], D, pq + 2);
    if (R > 0) std::copy_n(&sc.acc_lr[size_t(qi) * R], R, pq + 2 + D);
  }
}

// A multi-chunk item once all its units are done: each query's chunk
// partials merged in chunk order (only the chunks it reaches), then finished.
void merge_item(const Item& it, const AttentionPlan& plan, int32_t n_heads, const KvLayerView& kv, float* out,
                const SeqLr& lr, const PartOut& po, Scratch& sc) {
  const int D = kv.head_dim;
  const int nh = it.h1 - it.h0;
  const int nq = (it.r1 - it.r0) * nh;
  const bool lr_acc = lr.fused();
  const int R = lr_acc ? lr.rank : 0;
  const int64_t pf = part_floats(D, R);
  sc.m.resize(nq);
  sc.l.resize(nq);
  sc.acc.resize(size_t(nq) * D);
  sc.acc_lr.resize(size_t(nq) * R);
  sc.qpos.resize(nq);
  for (int qi = 0; qi < nq; ++qi) {
    const int32_t pos = plan.row_pos[it.r0 + qi / nh];
    sc.qpos[qi] = pos;
    const int32_t seen = pos / kChunkKeys + 1;  // chunks this query reaches
    const int32_t first = attention_key_begin(pos, plan.window) / kChunkKeys;  // and the first of them
    float m = -std::numeric_limits<float>::infinity();
    for (int32_t c = first; c < seen; ++c) m = std::max(m, po.part[(int64_t(c) * nq + qi) * pf]);
    float* acc = &sc.acc[size_t(qi) * D];
    float* acc_lr = sc.acc_lr.data() + size_t(qi) * R;
    float l = 0.0f;
    for (int32_t c = first; c < seen; ++c) {
      const float* pq = po.part + (int64_t(c) * nq + qi) * pf;
      const float f = std::exp(pq[0] - m);
      if (c == first) {
        l = pq[1] * f;
        for (int d = 0; d < D; ++d) acc[d] = pq[2 + d] * f;
        for (int k = 0; k < R; ++k) acc_lr[k] = pq[2 + D + k] * f;
      } else {
        l += pq[1] * f;
        for (int d = 0; d < D; ++d) acc[d] += pq[2 + d] * f;
        for (int k = 0; k < R; ++k) acc_lr[k] += pq[2 + D + k] * f;
      }
    }
    sc.m[qi] = m;
    sc.l[qi] = l;
  }
  finish_item(it, plan, n_heads, kv, out, lr, lr_acc, sc.m.data(), sc.l.data(), sc.acc.data(), sc.acc_lr.data(),
              po.hist, po.hist_m, sc.qpos.data());
}

// The expand path's V rows of one sequence: vexp[j] = V_base[j] + scale ·
// (V_lr[j] · B^T) for keys j < n_keys, over the pool's threads.
template <typename ParallelFor>
void expand_values(const AttentionPlan& plan, int32_t seq, const KvLayerView& kv, int32_t n_keys,
                   std::vector<float>& vexp, ParallelFor&& parallel_for) {
  const LrAttention& lr = *plan.lr;
  const int64_t width = int64_t(kv.kv_heads) * kv.head_dim;
  const int32_t R = lr.rank[seq], bs = kv.block_size;
  const int32_t* blocks = plan.block_ids + plan.block_indptr[seq];
  const int32_t* lr_blocks = lr.block_ids + lr.block_indptr[seq];
  const float* b = lr.b[seq];
  const float sc = lr.scale[seq];
  // scale · B^T, (R, width): each key's expansion is then R row updates
  // over width contiguous floats, which vectorise.
  std::vector<float> bt(size_t(R) * width);
  for (int64_t c = 0; c < width; ++c)
    for (int32_t k = 0; k < R; ++k) bt[size_t(k) * width + c] = sc * b[c * R + k];
  vexp.resize(size_t(n_keys) * width);
  parallel_for(n_keys, [&](int64_t j0, int64_t j1) {
    std::vector<float> lrow(R);  // the key's LR row, widened
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t v = int64_t(blocks[j / bs]) * kv.block_stride + (j % bs) * width;
      const int64_t le = int64_t(lr_blocks[j / bs]) * lr.block_stride + (j % bs) * lr.width;
      cpu::kv_to_f32(lr.dtype, cpu::kv_elem(lr.lr, lr.dtype, le), lrow.data(), R);
      const float* l = lrow.data();
      float* o = &vexp[size_t(j) * width];
      cpu::kv_to_f32(kv.dtype, cpu::kv_elem(kv.v, kv.dtype, v), o, width);
      for (int32_t k = 0; k < R; ++k) {
        const float lk = l[k];
        const float* br = &bt[size_t(k) * width];
        for (int64_t c = 0; c < width; ++c) o[c] += lk * br[c];
      }
    }
  });
}

}  // namespace

void CpuBackend::attention(const AttentionPlan& plan, const float* q, int32_t n_heads, const KvLayerView& kv,
                           float scale, float* out) {
  const int32_t group = n_heads / kv.kv_heads;  // query heads per kv head
  // Query heads of one kv head stay in one item: splitting them would gather
  // the same key tiles once per head, which costs more than it balances
  // (measured on a one-sequence decode step).
  const int32_t heads_per_item = group;
  const int32_t rows_per_item = std::max(1, kQueries / heads_per_item);

  // The per-call lists live in the caller's thread_local vectors, reused call
  // after call (30 layers a decode step): no allocation once grown. The
  // workers reach them through these references (a lambda that named a
  // thread_local directly would see its own thread's).
  thread_local std::vector<Item> tl_items;
  thread_local std::vector<SeqLr> tl_lrs;
  thread_local std::vector<Unit> tl_units;
  thread_local std::vector<int32_t> tl_multi;
  std::vector<Item>& items = tl_items;
  items.clear();
  for (int32_t s = 0; s < plan.n_seqs; ++s) {
    for (int32_t r0 = plan.row_indptr[s]; r0 < plan.row_indptr[s + 1]; r0 += rows_per_item) {
      int32_t r1 = std::min(plan.row_indptr[s + 1], r0 + rows_per_item);
      int32_t pmax = 0, kmin = std::numeric_limits<int32_t>::max();
      bool colsums = false;
      for (int32_t r = r0; r < r1; ++r) {
        pmax = std::max(pmax, plan.row_pos[r]);
        kmin = std::min(kmin, attention_key_begin(plan.row_pos[r], plan.window));
        colsums |= plan.colsum_slot != nullptr && plan.colsum_slot[r] >= 0;
      }
      for (int32_t kvh = 0; kvh < kv.kv_heads; ++kvh)
        for (int32_t h0 = kvh * group; h0 < (kvh + 1) * group; h0 += heads_per_item)
          items.push_back(
              {s, r0, r1, kvh, h0, h0 + heads_per_item, pmax, kmin, pmax / kChunkKeys + 1, colsums, -1, -1});
    }
  }

  // Each sequence's low-rank V part (Flash-LoRA-Attention), or its expanded
  // V rows on the reference path.
  std::vector<SeqLr>& lrs = tl_lrs;
  lrs.assign(plan.lr != nullptr ? plan.n_seqs : 0, SeqLr{});
  std::vector<std::vector<float>>& vexp = lr_vexp_;
  if (plan.lr != nullptr) {
    const LrAttention& lr = *plan.lr;
    for (int32_t s = 0; s < plan.n_seqs; ++s) {
      const int32_t rows = plan.row_indptr[s + 1] - plan.row_indptr[s];
      if (lr.b[s] == nullptr || rows == 0) continue;
      lrs[s] = SeqLr{lr.b[s], lr.block_ids + lr.block_indptr[s], lr.rank[s], lr.scale[s], nullptr};
      int32_t pmax = 0;
      for (int32_t r = plan.row_indptr[s]; r < plan.row_indptr[s + 1]; ++r) pmax = std::max(pmax, plan.row_pos[r]);
      // Extra multiply-adds per kv head: fused rows·group·(L·r + r·D),
      // expanded L·r·D (App. B's count, per kv head under GQA). The fused
      // ones ride in P·V's pass on loads already made, so they weigh about a
      // sixth of the expansion's, which writes and rereads V in f32: on
      // SmolLM2's layer at 2,048 keys (bench_lora_attention, 2026-11-26)
      // fused is 10-20% ahead at 32 rows, level at 128 (f32 cache: expand
      // 2-5% ahead), level to 8% behind at 512. The factor 6 puts the
      // switch near 120 rows at head_dim 64.
      const int64_t L = pmax + 1, D = kv.head_dim;
      const bool expand = lr.path == LrAttention::Path::kExpand ||
                          (lr.path == LrAttention::Path::kAuto && int64_t(rows) * group * (L + D) > 6 * L * D);
      if (!expand) continue;
      if (vexp.size() < size_t(plan.n_seqs)) vexp.resize(plan.n_seqs);
      expand_values(plan, s, kv, pmax + 1, vexp[s], [&](int64_t n, auto&& fn) { parallel_for(n, 16, fn); });
      lrs[s].vexp = vexp[s].data();
    }
  }

  // Units, and room for the partials (and tile probabilities, for column
  // sums) of the items whose rows reach past the first chunk.
  std::vector<Unit>& units = tl_units;
  std::vector<int32_t>& multi = tl_multi;  // items with more than one chunk
  units.clear();
  multi.clear();
  int64_t part_size = 0, hist_size = 0;
  // Units chunk by chunk, and within a chunk item by item: the kv heads of
  // one sequence's rows follow each other over the same keys. A head reads
  // 128 of every 384 bytes of a key's row (SmolLM2's f16 K); read that way,
  // memory gives 18 GB/s here against 35 read whole (2026-11-29). The first
  // kv head's item prefetches the whole rows (run_unit), and the others,
  // next in this order, find them in cache.
  int32_t max_chunks = 0;
  for (const Item& it : items) max_chunks = std::max(max_chunks, it.n_chunks);
  for (int32_t c = 0; c < max_chunks; ++c)
    for (int32_t i = 0; i < int32_t(items.size()); ++i) {
      const Item& it = items[i];
      // (Chunks wholly before every row's window are not run: no row reads them.)
      if (c < it.n_chunks && c >= it.kmin / kChunkKeys)
        units.push_back({i, c,
                         (std::min(it.pmax, (c + 1) * kChunkKeys - 1) - std::max(c * kChunkKeys, it.kmin) + 1) *
                             (it.r1 - it.r0)});
    }
  for (int32_t i = 0; i < int32_t(items.size()); ++i) {
    Item& it = items[i];
    const int64_t rows = it.r1 - it.r0;
    if (it.n_chunks == 1) continue;
    multi.push_back(i);
    const int64_t nq = rows * (it.h1 - it.h0);
    const SeqLr& lr = lrs.empty() ? kNoLr : lrs[it.seq];
    const int R = lr.fused() ? lr.rank : 0;
    it.part = part_size;
    part_size += int64_t(it.n_chunks) * nq * part_floats(kv.head_dim, R);
    if (it.colsums) {
      it.hist = hist_size;
      hist_size += nq * ((it.pmax + kKeys) / kKeys) * (kKeys + 1);
    }
  }
  // Largest first: under a causal mask later rows cost more.
  std::stable_sort(units.begin(), units.end(), [](const Unit& a, const Unit& b) { return a.cost > b.cost; });
  attn_part_.resize(size_t(part_size));
  attn_hist_.resize(size_t(hist_size));
  auto part_out = [&](const Item& it) {
    PartOut po;
    if (it.n_chunks == 1) return po;
    po.part = attn_part_.data() + it.part;
    if (it.hist >= 0) {
      const int64_t tiles = int64_t(it.r1 - it.r0) * (it.h1 - it.h0) * ((it.pmax + kKeys) / kKeys);
      po.hist = attn_hist_.data() + it.hist;
      po.hist_m = po.hist + tiles * kKeys;
    }
    return po;
  };

  std::atomic<int64_t> next{0};
  const int64_t n_units = int64_t(units.size());
  auto worker = [&](int64_t, int64_t, int) {
    thread_local Scratch sc;  // this worker's, grown once
    for (int64_t u = next.fetch_add(1); u < n_units; u = next.fetch_add(1)) {
      const Item& it = items[units[u].item];
      run_unit(it, units[u].chunk, plan, q, n_heads, kv, scale, out, sc, lrs.empty() ? kNoLr : lrs[it.seq],
               part_out(it));
    }
  };
  if (pool_.size() == 1 || n_units <= 1) {
    worker(0, 1, 0);
  } else {
    pool_.parallel_for(std::min<int64_t>(pool_.size(), n_units), worker);
  }
  if (multi.empty()) return;
  std::atomic<int64_t> next_merge{0};
  const int64_t n_multi = int64_t(multi.size());
  auto merger = [&](int64_t, int64_t, int) {
    thread_local Scratch sc;  // this worker's, grown once
    for (int64_t i = next_merge.fetch_add(1); i < n_multi; i = next_merge.fetch_add(1)) {
      const Item& it = items[multi[i]];
      merge_item(it, plan, n_heads, kv, out, lrs.empty() ? kNoLr : lrs[it.seq], part_out(it), sc);
    }
  };
  if (pool_.size() == 1 || n_multi <= 1) {
    merger(0, 1, 0);
  } else {
    pool_.parallel_for(std::min<int64_t>(pool_.size(), n_multi), merger);
  }
}

}  // namespace agentkv
