// Rows of the KV cache to and from f32, whatever its element type
// (KvLayerView::dtype). f16 goes through F16C where the build has it (round to
// nearest even, as f32_to_fp16), bf16 through integer shifts, and the scalar
// fallbacks are the format's own conversions, so every path stores and reads
// back the same bits.
#pragma once

#include <cstdint>
#include <cstring>

#include "backend/backend.h"
#include "format/fp16.h"

#if defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace agentkv::cpu {

// Element e of a K or V array of type t.
inline const void* kv_elem(const void* base, KvDType t, int64_t e) {
  return static_cast<const uint8_t*>(base) + e * kv_dtype_bytes(t);
}
inline void* kv_elem(void* base, KvDType t, int64_t e) { return static_cast<uint8_t*>(base) + e * kv_dtype_bytes(t); }

// Eight f16 or bf16 values widened to f32: the one conversion kv_to_f32 and
// the attention loops that read a 16-bit cache in place share.
#if defined(__F16C__)
inline __m256 f16x8_to_f32(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
#endif
#if defined(__AVX2__)
inline __m256 bf16x8_to_f32(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
#endif

// dst[0..n) = src[0..n) widened to f32.
inline void kv_to_f32(KvDType t, const void* src, float* dst, int64_t n) {
  if (t == KvDType::kF32) {
    std::memcpy(dst, src, sizeof(float) * n);
    return;
  }
  const uint16_t* h = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  if (t == KvDType::kF16) {
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, f16x8_to_f32(h + i));
#endif
    for (; i < n; ++i) dst[i] = fp16_to_f32(h[i]);
    return;
  }
#if defined(__AVX2__)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, bf16x8_to_f32(h + i));
#endif
  for (; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
}

// dst[0..n) = src[0..n) rounded to t.
inline void kv_from_f32(KvDType t, const float* src, void* dst, int64_t n) {
  if (t == KvDType::kF32) {
    std::memcpy(dst, src, sizeof(float) * n);
    return;
  }
  uint16_t* h = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  if (t == KvDType::kF16) {
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i),
                       _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
    for (; i < n; ++i) h[i] = f32_to_fp16(src[i]);
    return;
  }
  for (; i < n; ++i) h[i] = f32_to_bf16(src[i]);
}

}  // namespace agentkv::cpu
