// attention_wide.h's kernels, compiled for AVX-512F under `#pragma GCC
// target` so that the rest of the program keeps the x86-64-v3 baseline; the
// caller checks attention_wide() before it calls them. Clang builds (the
// fuzzers) compile none of them, and attention_wide() is false there.
#include "backend/cpu/attention_wide.h"

#include <algorithm>
#include <limits>

#include "backend/cpu/matmul_q8.h"
#include "backend/cpu/simd.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && AGENTKV_AVX2
#define AGENTKV_WIDE_ATTENTION 1
#include <immintrin.h>
#endif

namespace agentkv::cpu {

#if AGENTKV_WIDE_ATTENTION

bool attention_wide() {
  const Q8Isa isa = q8_isa();
  return isa == Q8Isa::kAvx512 || isa == Q8Isa::kAmx || isa == Q8Isa::kAmxEmulated;
}

#pragma GCC push_options
#pragma GCC target("avx512f")

namespace {

// Q queries against the tile: two vectors of sixteen scores per query.
template <int Q>
inline void scores(const float* qs, const float* kt, float* s, int D) {
  __m512 a[Q][2];
  for (int q = 0; q < Q; ++q) a[q][0] = a[q][1] = _mm512_setzero_ps();
  for (int d = 0; d < D; ++d) {
    const __m512 k0 = _mm512_loadu_ps(kt + d * kWideTileKeys),
                 k1 = _mm512_loadu_ps(kt + d * kWideTileKeys + 16);
    for (int q = 0; q < Q; ++q) {
      const __m512 x = _mm512_set1_ps(qs[q * D + d]);
      a[q][0] = _mm512_fmadd_ps(x, k0, a[q][0]);
      a[q][1] = _mm512_fmadd_ps(x, k1, a[q][1]);
    }
  }
  for (int q = 0; q < Q; ++q) {
    _mm512_storeu_ps(s + q * kWideTileKeys, a[q][0]);
    _mm512_storeu_ps(s + q * kWideTileKeys + 16, a[q][1]);
  }
}

struct F32 {
  using T = float;
  static __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
};
// Both widenings are exact, as kv_convert.h's eight-lane ones are. (The
// zero-masked forms with a full mask: GCC 12 warns on the unmasked ones'
// undefined pass-through operand.)
constexpr __mmask16 kAll16 = 0xffff;
struct F16 {
  using T = uint16_t;
  static __m512 load16(const uint16_t* p) {
    return _mm512_maskz_cvtph_ps(kAll16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
};
struct BF16 {
  using T = uint16_t;
  static __m512 load16(const uint16_t* p) {
    const __m512i w =
        _mm512_maskz_cvtepu16_epi32(kAll16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll16, w, 16));
  }
};

// Columns [d, d + 16 * NV) of Q queries over n keys: each V vector is
// loaded once and feeds Q chains.
template <class L, int Q, int NV>
inline void pv_pass(float* acc, const float* p, const typename L::T* const* v, int n, int D, int d) {
  __m512 a[Q][NV];
  for (int q = 0; q < Q; ++q)
    for (int i = 0; i < NV; ++i) a[q][i] = _mm512_loadu_ps(acc + q * D + d + 16 * i);
  for (int t = 0; t < n; ++t) {
    __m512 vv[NV];
    for (int i = 0; i < NV; ++i) vv[i] = L::load16(v[t] + d + 16 * i);
    for (int q = 0; q < Q; ++q) {
      const __m512 pt = _mm512_set1_ps(p[q * kWideTileKeys + t]);
      for (int i = 0; i < NV; ++i) a[q][i] = _mm512_fmadd_ps(pt, vv[i], a[q][i]);
    }
  }
  for (int q = 0; q < Q; ++q)
    for (int i = 0; i < NV; ++i) _mm512_storeu_ps(acc + q * D + d + 16 * i, a[q][i]);
}

template <class L, int Q>
inline void pv_queries(float* acc, const float* p, const typename L::T* const* v, int n, int D) {
  int d = 0;
  for (; d + 64 <= D; d += 64) pv_pass<L, Q, 4>(acc, p, v, n, D, d);
  if (d < D) pv_pass<L, Q, 2>(acc, p, v, n, D, d);  // D % 32 == 0
}

template <class L>
void pv_heads(float* acc, const float* p, const typename L::T* const* v, int n, int D, int nq) {
  int q = 0;
  for (; q + 6 <= nq; q += 6) pv_queries<L, 6>(acc + q * D, p + q * kWideTileKeys, v, n, D);
  for (; q + 3 <= nq; q += 3) pv_queries<L, 3>(acc + q * D, p + q * kWideTileKeys, v, n, D);
  for (; q < nq; ++q) pv_queries<L, 1>(acc + q * D, p + q * kWideTileKeys, v, n, D);
}

// Keys [t0, t0 + 16) by dims [d0, d0 + 16) into kt: sixteen rows widened,
// then a 16 x 16 transpose in four rounds of shuffles (pairs of rows, pairs
// of pairs within each 128-bit lane, then 128-bit lanes across registers
// twice). Every value only moves.
template <class L>
inline void transpose16(const typename L::T* const* k, int t0, int d0, float* kt) {
  __m512 r[16], u[16];
  for (int i = 0; i < 16; ++i) r[i] = L::load16(k[t0 + i] + d0);
  for (int i = 0; i < 16; i += 2) {
    u[i] = _mm512_maskz_unpacklo_ps(kAll16, r[i], r[i + 1]);      // a0 b0 a1 b1 per lane
    u[i + 1] = _mm512_maskz_unpackhi_ps(kAll16, r[i], r[i + 1]);  // a2 b2 a3 b3 per lane
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_maskz_shuffle_ps(kAll16, u[i], u[i + 2], 0x44);      // a0 b0 c0 d0
    r[i + 1] = _mm512_maskz_shuffle_ps(kAll16, u[i], u[i + 2], 0xee);  // a1 b1 c1 d1
    r[i + 2] = _mm512_maskz_shuffle_ps(kAll16, u[i + 1], u[i + 3], 0x44);
    r[i + 3] = _mm512_maskz_shuffle_ps(kAll16, u[i + 1], u[i + 3], 0xee);
  }
  // r[4g + j]: 128-bit lane l holds dim 4l + j of keys 4g..4g+3. Then
  // u[j] = lanes (0, 2) of r[j] and of r[4 + j]: dims j and 8 + j of keys
  // 0-7; u[4 + j]: lanes (1, 3), dims 4 + j and 12 + j; u[8 + j] and
  // u[12 + j] the same of keys 8-15.
  for (int j = 0; j < 4; ++j) {
    u[j] = _mm512_maskz_shuffle_f32x4(kAll16, r[j], r[4 + j], 0x88);
    u[4 + j] = _mm512_maskz_shuffle_f32x4(kAll16, r[j], r[4 + j], 0xdd);
    u[8 + j] = _mm512_maskz_shuffle_f32x4(kAll16, r[8 + j], r[12 + j], 0x88);
    u[12 + j] = _mm512_maskz_shuffle_f32x4(kAll16, r[8 + j], r[12 + j], 0xdd);
  }
  // The same selection again gathers each dim's four 128-bit pieces, keys
  // 0-15 in order.
  for (int j = 0; j < 4; ++j) {
    const __m512 d0v = _mm512_maskz_shuffle_f32x4(kAll16, u[j], u[8 + j], 0x88);       // dim j
    const __m512 d2v = _mm512_maskz_shuffle_f32x4(kAll16, u[j], u[8 + j], 0xdd);       // dim 8 + j
    const __m512 d1v = _mm512_maskz_shuffle_f32x4(kAll16, u[4 + j], u[12 + j], 0x88);  // dim 4 + j
    const __m512 d3v = _mm512_maskz_shuffle_f32x4(kAll16, u[4 + j], u[12 + j], 0xdd);  // dim 12 + j
    _mm512_storeu_ps(kt + (d0 + j) * kWideTileKeys + t0, d0v);
    _mm512_storeu_ps(kt + (d0 + 4 + j) * kWideTileKeys + t0, d1v);
    _mm512_storeu_ps(kt + (d0 + 8 + j) * kWideTileKeys + t0, d2v);
    _mm512_storeu_ps(kt + (d0 + 12 + j) * kWideTileKeys + t0, d3v);
  }
}

template <class L>
int keys_transposed(const typename L::T* const* k, int n, int D, float* kt) {
  if (D % 16 != 0) return 0;
  int t0 = 0;
  for (; t0 + 16 <= n; t0 += 16)
    for (int d0 = 0; d0 < D; d0 += 16) transpose16<L>(k, t0, d0, kt);
  return t0;
}

// Lanes 0-7 or 8-15 (AVX-512F only: extractf32x8 is DQ's). This file's maskz forms
// with full masks are the plain instructions (see F16 below).
// (GCC 12's _mm512_castps512_ps256 is the unmasked extract, which warns.)
template <int Half>
inline __m256 half8(__m512 v) {
  return _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, _mm512_castps_pd(v), Half));
}

// simd.h's exp8, lane for lane: the same clamp, rounding, polynomial and
// scaling, so each lane gives exp8's bits.
inline __m512 exp16(__m512 x) {
  using namespace exp_consts;
  const __m512 hi = _mm512_set1_ps(kHi);
  const __m512 lo = _mm512_set1_ps(kLo);
  const __m512 log2e = _mm512_set1_ps(kLog2e);
  const __m512 c1 = _mm512_set1_ps(kC1);
  const __m512 c2 = _mm512_set1_ps(kC2);
  const __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_maskz_min_ps(kAll16, _mm512_maskz_max_ps(kAll16, x, lo), hi);
  const __m512 fx = _mm512_maskz_roundscale_ps(kAll16, _mm512_mul_ps(x, log2e),
                                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm512_fnmadd_ps(fx, c1, x);
  x = _mm512_fnmadd_ps(fx, c2, x);
  __m512 y = _mm512_set1_ps(kPoly[0]);
  for (int i = 1; i < 6; ++i) y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(kPoly[i]));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
  const __m512i n = _mm512_add_epi32(_mm512_maskz_cvtps_epi32(kAll16, fx), _mm512_set1_epi32(127));
  const __m512 pow2n = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll16, n, 23));
  return _mm512_maskz_mul_ps(__mmask16(~under), y, pow2n);  // exp8's andnot: +0 below lo
}

}  // namespace

void wide_softmax_tile(float* p, int valid, float m_old, float* m_new, float* sum) {
  static_assert(kWideTileKeys == 32);
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  // Keys t < valid kept, the rest -inf (softmax_tile's blend).
  const uint32_t keep = valid >= 32 ? 0xffffffffu : (1u << valid) - 1u;
  const __m512 w0 = _mm512_mask_loadu_ps(ninf, __mmask16(keep), p),
               w1 = _mm512_mask_loadu_ps(ninf, __mmask16(keep >> 16), p + 16);
  // softmax_tile's v0..v3 are w0's and w1's halves; its max(max(v0, v1),
  // max(v2, v3)) is one max of [v0 | v2] and [v1 | v3], the same operands
  // in the same places (which matters only for NaN), then its 128-bit steps.
  const __m512 a = _mm512_maskz_shuffle_f32x4(kAll16, w0, w1, 0x44),
               b = _mm512_maskz_shuffle_f32x4(kAll16, w0, w1, 0xee);
  const __m512 ab = _mm512_maskz_max_ps(kAll16, a, b);
  const __m256 mx = _mm256_max_ps(half8<0>(ab), half8<1>(ab));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
  const float m = std::max(m_old, _mm_cvtss_f32(m4));
  const __m512 mv = _mm512_set1_ps(m);
  const __m512 e0 = exp16(_mm512_sub_ps(w0, mv)), e1 = exp16(_mm512_sub_ps(w1, mv));
  _mm512_storeu_ps(p, e0);
  _mm512_storeu_ps(p + 16, e1);
  // softmax_tile's sum: ((v0 + v1) + v2) + v3 lane by lane, then hsum8.
  __m256 acc = _mm256_add_ps(half8<0>(e0), half8<1>(e0));
  acc = _mm256_add_ps(acc, half8<0>(e1));
  acc = _mm256_add_ps(acc, half8<1>(e1));
  *m_new = m;
  *sum = hsum8(acc);
}

int wide_keys_transposed(const float* const* k, int n, int D, float* kt) {
  return keys_transposed<F32>(k, n, D, kt);
}
int wide_keys_transposed_f16(const uint16_t* const* k, int n, int D, float* kt) {
  return keys_transposed<F16>(k, n, D, kt);
}
int wide_keys_transposed_bf16(const uint16_t* const* k, int n, int D, float* kt) {
  return keys_transposed<BF16>(k, n, D, kt);
}

void wide_tile_scores(const float* qs, const float* kt, float* s, int nq, int D) {
  int q = 0;
  for (; q + 6 <= nq; q += 6) scores<6>(qs + q * D, kt, s + q * kWideTileKeys, D);
  for (; q + 4 <= nq; q += 4) scores<4>(qs + q * D, kt, s + q * kWideTileKeys, D);
  for (; q + 2 <= nq; q += 2) scores<2>(qs + q * D, kt, s + q * kWideTileKeys, D);
  for (; q < nq; ++q) scores<1>(qs + q * D, kt, s + q * kWideTileKeys, D);
}

void wide_pv_heads(float* acc, const float* p, const float* const* v, int n, int D, int nq) {
  pv_heads<F32>(acc, p, v, n, D, nq);
}
void wide_pv_heads_f16(float* acc, const float* p, const uint16_t* const* v, int n, int D, int nq) {
  pv_heads<F16>(acc, p, v, n, D, nq);
}
void wide_pv_heads_bf16(float* acc, const float* p, const uint16_t* const* v, int n, int D, int nq) {
  pv_heads<BF16>(acc, p, v, n, D, nq);
}

#pragma GCC pop_options

#else  // not built: attention_wide() is false and the kernels are never called

bool attention_wide() { return false; }
void wide_softmax_tile(float*, int, float, float*, float*) {}
int wide_keys_transposed(const float* const*, int, int, float*) { return 0; }
int wide_keys_transposed_f16(const uint16_t* const*, int, int, float*) { return 0; }
int wide_keys_transposed_bf16(const uint16_t* const*, int, int, float*) { return 0; }
void wide_tile_scores(const float*, const float*, float*, int, int) {}
void wide_pv_heads(float*, const float*, const float* const*, int, int, int) {}
void wide_pv_heads_f16(float*, const float*, const uint16_t* const*, int, int, int) {}
void wide_pv_heads_bf16(float*, const float*, const uint16_t* const*, int, int, int) {}

#endif

}  // namespace agentkv::cpu
