// attention_wide.h's kernels, compiled for AVX-512F under `#pragma GCC
// target` so that the rest of the program keeps the x86-64-v3 baseline; the
// caller checks attention_wide() before it calls them. Clang builds (the
// fuzzers) compile none of them, and attention_wide() is false there.
#include "backend/cpu/attention_wide.h"

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

}  // namespace

void wide_tile_scores(const float* qs, const float* kt, float* s, int nq, int D) {
  int q = 0;
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
void wide_tile_scores(const float*, const float*, float*, int, int) {}
void wide_pv_heads(float*, const float*, const float* const*, int, int, int) {}
void wide_pv_heads_f16(float*, const float*, const uint16_t* const*, int, int, int) {}
void wide_pv_heads_bf16(float*, const float*, const uint16_t* const*, int, int, int) {}

#endif

}  // namespace agentkv::cpu
