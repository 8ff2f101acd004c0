// The gated FFN activations: SwiGLU (Llama, Qwen) and GeGLU (Gemma), both
// out[i] = gate[i] / (1 + e^{arg(gate[i])}) * up[i] on one exp and division:
// silu(x) = x / (1 + e^{-x}), and through 1/2 (1 + tanh(u)) = 1 / (1 +
// e^{-2u}), gelu_tanh(x) = x / (1 + e^{-2u}), u = sqrt(2/pi) (x + 0.044715 x^3).
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/simd.h"

namespace agentkv {

namespace {

constexpr float kGeluA = 0.044715f;
constexpr float kGeluM2C = -2.0f * 0.79788456080286535588f;  // -2 sqrt(2/pi)

// The exponent of each activation, eight lanes (AVX2) or one value.
struct SiluArg {
#if AGENTKV_AVX2
  static __m256 eight(__m256 g) { return _mm256_xor_ps(g, _mm256_set1_ps(-0.0f)); }
#endif
  static float one(float g) { return -g; }
};
struct GeluTanhArg {
#if AGENTKV_AVX2
  static __m256 eight(__m256 g) {
    const __m256 inner = _mm256_fmadd_ps(_mm256_mul_ps(g, g), _mm256_set1_ps(kGeluA), _mm256_set1_ps(1.0f));
    return _mm256_mul_ps(_mm256_mul_ps(g, inner), _mm256_set1_ps(kGeluM2C));  // -2u
  }
#endif
  static float one(float g) { return g * std::fma(g * g, kGeluA, 1.0f) * kGeluM2C; }
};

// Reads gate[i] before writing out[i], so out may alias gate (or up).
template <typename Arg>
void glu_range(const float* gate, const float* up, float* out, int64_t b, int64_t e) {
  int64_t i = b;
#if AGENTKV_AVX2
  const __m256 one = _mm256_set1_ps(1.0f);
  auto eight = [&](const float* g8, const float* u8, float* o8) {
    __m256 g = _mm256_loadu_ps(g8);
    __m256 den = _mm256_add_ps(one, cpu::exp8(Arg::eight(g)));
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
  for (; i < e; ++i) out[i] = gate[i] / (1.0f + std::exp(Arg::one(gate[i]))) * up[i];
#endif
}

}  // namespace

void CpuBackend::geglu(const float* gate, const float* up, float* out, int64_t n) {
  parallel_for(n, 1 << 14, [&](int64_t b, int64_t e) { glu_range<GeluTanhArg>(gate, up, out, b, e); });
}

void CpuBackend::swiglu(const float* gate, const float* up, float* out, int64_t n) {
  parallel_for(n, 1 << 14, [&](int64_t b, int64_t e) { glu_range<SiluArg>(gate, up, out, b, e); });
}

}  // namespace agentkv
