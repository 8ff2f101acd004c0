// Half-precision (IEEE binary16) and bfloat16 conversions to and from f32:
// the dequantizers' block scales and F16/BF16 rows, the writers, and the CPU
// backend's f16/bf16 KV cache (its scalar path).
#pragma once

#include <cstdint>
#include <cstring>

namespace agentkv {

inline float f32_from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Exact conversion of every binary16 value, including subnormals, inf and NaN.
inline float fp16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    // Subnormal (or zero): mant * 2^-24 is exact in f32.
    const float mag = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -mag : mag;
  }
  return f32_from_bits(sign | ((exp + (127 - 15)) << 23) | (mant << 13));
}

// bf16 is the high half of an f32.
inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

// IEEE half from float, round to nearest even; overflow gives infinity, NaN
// a quiet NaN. The same as F16C's _mm256_cvtps_ph(x, round-to-nearest) for
// every non-NaN input.
inline uint16_t f32_to_fp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t ax = x & 0x7fffffff;
  if (ax >= 0x7f800000) return sign | (ax > 0x7f800000 ? 0x7e00 : 0x7c00);  // NaN, inf
  if (ax >= 0x477ff000) return sign | 0x7c00;                              // rounds past 65504
  if (ax < 0x38800000) {                                                   // half subnormal or zero
    if (ax < 0x33000000) return sign;                                      // below half the smallest subnormal
    const uint32_t mant = (ax & 0x7fffff) | 0x800000;
    const int shift = 126 - static_cast<int>(ax >> 23);                    // 14..24
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return sign | static_cast<uint16_t>(half);
  }
  uint32_t half = ((ax >> 23) - 112) << 10 | ((ax >> 13) & 0x3ff);
  const uint32_t rem = ax & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;  // may carry into the exponent: still correct
  return sign | static_cast<uint16_t>(half);
}

// float -> bfloat16 bits, round to nearest even (NaN stays NaN).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// Unaligned little-endian loads: block fields sit at odd offsets.
inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline float load_fp16(const uint8_t* p) { return fp16_to_f32(load_u16(p)); }

}  // namespace agentkv
