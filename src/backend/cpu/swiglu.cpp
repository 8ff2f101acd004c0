// The gated FFN activations: SwiGLU (Llama, Qwen) and GeGLU (Gemma).
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/simd.h"

namespace agentkv {

namespace {
// out[i] = gate[i] / (1 + e^-gate[i]) * up[i]. Reads gate[i] before writing
// out[i], so out may alias gate (or up).
void swiglu_range(const float* gate, const float* up, float* out, int64_t b, int64_t e) {
  int64_t i = b;
#if AGENTKV_AVX2
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  auto eight = [&](const float* g8, const float* u8, float* o8) {
    __m256 g = _mm256_loadu_ps(g8);
    __m256 den = _mm256_add_ps(one, cpu::exp8(_mm256_xor_ps(g, sign)));
    _mm256_storeu_ps(o8, _mm256_mul_ps(_mm256_div_ps(g, den), _mm256_loadu_ps(u8)));
  };
  for (; i + 8 <= e; i += 8) eight(gate + i, up + i, out + i);
  // The tail through the same vector code: where a thread's slice ends must
  // not change an element's value (std::exp and exp8 round differently).
  if (i < e) {
    float g8[8] = {}, u8[8] = {}, o8[8];
    std::copy(gate + i, gate + e, g8);
    std::copy(up + i, up + e, u8);
    eight(g8, u8, o8);
    std::copy(o8, o8 + (e - i), out + i);
  }
#else
  for (; i < e; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
#endif
}

// out[i] = gelu_tanh(gate[i]) * up[i], through the identity 1/2 (1 + tanh(u))
// = 1 / (1 + e^{-2u}): gelu_tanh(x) = x / (1 + e^{-2u}), u = sqrt(2/pi) (x +
// 0.044715 x^3), on swiglu_range's exp and division (and its tail handling).
constexpr float kGeluA = 0.044715f;
constexpr float kGeluM2C = -2.0f * 0.79788456080286535588f;  // -2 sqrt(2/pi)
void geglu_range(const float* gate, const float* up, float* out, int64_t b, int64_t e) {
  int64_t i = b;
#if AGENTKV_AVX2
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 a = _mm256_set1_ps(kGeluA);
  const __m256 m2c = _mm256_set1_ps(kGeluM2C);
  auto eight = [&](const float* g8, const float* u8, float* o8) {
    __m256 g = _mm256_loadu_ps(g8);
    __m256 inner = _mm256_fmadd_ps(_mm256_mul_ps(g, g), a, one);  // 1 + a x^2
    __m256 arg = _mm256_mul_ps(_mm256_mul_ps(g, inner), m2c);      // -2u
    __m256 den = _mm256_add_ps(one, cpu::exp8(arg));
    _mm256_storeu_ps(o8, _mm256_mul_ps(_mm256_div_ps(g, den), _mm256_loadu_ps(u8)));
  };
  for (; i + 8 <= e; i += 8) eight(gate + i, up + i, out + i);
  if (i < e) {
    float g8[8] = {}, u8[8] = {}, o8[8];
    std::copy(gate + i, gate + e, g8);
    std::copy(up + i, up + e, u8);
    eight(g8, u8, o8);
    std::copy(o8, o8 + (e - i), out + i);
  }
#else
  for (; i < e; ++i) {
    const float g = gate[i];
    const float arg = g * std::fma(g * g, kGeluA, 1.0f) * kGeluM2C;
    out[i] = g / (1.0f + std::exp(arg)) * up[i];
  }
#endif
}
}  // namespace

void CpuBackend::geglu(const float* gate, const float* up, float* out, int64_t n) {
  parallel_for(n, 1 << 14, [&](int64_t b, int64_t e) { geglu_range(gate, up, out, b, e); });
}

void CpuBackend::swiglu(const float* gate, const float* up, float* out, int64_t n) {
  parallel_for(n, 1 << 14, [&](int64_t b, int64_t e) { swiglu_range(gate, up, out, b, e); });
}

}  // namespace agentkv
