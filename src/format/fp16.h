// Half-precision (IEEE binary16) and bfloat16 to f32 conversion, used by the
// dequantizers for block scales and by F16/BF16 rows. Internal to format/.
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
