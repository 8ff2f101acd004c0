// Small vector helpers shared by the CPU kernels. AVX2+FMA when the build
// targets it (-march=native on this machine), with scalar fallbacks so the
// kernels stay correct on any x86-64 or other target.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define AGENTKV_AVX2 1
#endif

namespace agentkv::cpu {

#if AGENTKV_AVX2
inline float hsum8(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  return _mm_cvtss_f32(lo);
}

// e^x for 8 lanes: Cephes-style range reduction x = n ln2 + r, |r| <= ln2/2,
// degree-6 polynomial for e^r, 2^n through the exponent bits. About 1-2 ulp
// over the clamped range; std::exp is not vectorised without -ffast-math and
// softmax / SiLU are dominated by it otherwise.
// exp8's constants, shared with attention_wide.cpp's exp16 (which must give
// exp8's bits lane for lane): the clamp, log2(e), ln 2 in two parts, and the
// polynomial's coefficients from the highest degree down.
namespace exp_consts {
inline constexpr float kHi = 88.3762626647949f;
inline constexpr float kLo = -87.3365447504f;  // below: the result flushes to 0
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kC1 = 0.693359375f, kC2 = -2.12194440e-4f;
inline constexpr float kPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                   4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
}  // namespace exp_consts

inline __m256 exp8(__m256 x) {
  using namespace exp_consts;
  const __m256 hi = _mm256_set1_ps(kHi);
  const __m256 lo = _mm256_set1_ps(kLo);
  const __m256 log2e = _mm256_set1_ps(kLog2e);
  const __m256 c1 = _mm256_set1_ps(kC1);
  const __m256 c2 = _mm256_set1_ps(kC2);
  __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm256_fnmadd_ps(fx, c1, x);
  x = _mm256_fnmadd_ps(fx, c2, x);
  __m256 y = _mm256_set1_ps(kPoly[0]);
  for (int i = 1; i < 6; ++i) y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(kPoly[i]));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  __m256i n = _mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127));
  __m256 pow2n = _mm256_castsi256_ps(_mm256_slli_epi32(n, 23));
  return _mm256_andnot_ps(under, _mm256_mul_ps(y, pow2n));
}
#endif

// sum_i a[i] * b[i]
inline float dot_f32(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  float s = 0.0f;
#if AGENTKV_AVX2
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  s = hsum8(_mm256_add_ps(acc0, acc1));
#endif
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// x[i] = exp(x[i]) for i < n.
inline void exp_inplace(float* x, int64_t n) {
  int64_t i = 0;
#if AGENTKV_AVX2
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, exp8(_mm256_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) x[i] = std::exp(x[i]);
}

}  // namespace agentkv::cpu
