// Block decoders for matmul_quant: each expands one 32-element group of a
// ggml block (layouts as in src/format/dequant.cpp and dequant_k.cpp, after
// ggml-common.h) into f32 values, with AVX2 (eight lanes at a time, kept in
// registers) and scalar versions. Values equal the format's dequantizers up
// to the rounding of one fused multiply-add (q * d + m in one step).
//
// Every decoder type has kElems (elements per block), kBytes (bytes per
// block) and decode(block, s, out) for group s < kElems / 32.
#pragma once

#include <cstdint>

#include "backend/cpu/simd.h"
#include "format/fp16.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace agentkv::cpu::quant {

// f.template operator()<R>() with R = rows, for 1 <= rows <= 4 (more: 4):
// the one place a runtime row count becomes the kernels' compile-time R.
template <class F>
inline void with_rows(int64_t rows, F&& f) {
  switch (rows) {
    case 1:
      return f.template operator()<1>();
    case 2:
      return f.template operator()<2>();
    case 3:
      return f.template operator()<3>();
    default:
      return f.template operator()<4>();
  }
}

// A block's f16 scale. The F16C instruction converts every binary16 value
// exactly, as fp16_to_f32 does, without its branches: a q4_1 block has two
// scales per 32 weights, and the scalar conversion was a third of the work.
inline float half(const uint8_t* p) {
#if defined(__F16C__)
  return _cvtsh_ss(load_u16(p));
#else
  return load_fp16(p);
#endif
}

#if AGENTKV_AVX2
// The 16 bytes of 4-bit pairs of a 32-element group as int32 lanes: low
// nibbles are elements 0-15, high nibbles 16-31 (q4_0, q4_1, q5_*).
inline void nibbles_split(const uint8_t* qs, __m256i q[4]) {
  // Bytes widened straight from memory, then split: fewer shuffles than
  // splitting 16 bytes first and widening four quarters.
  const __m256i mask = _mm256_set1_epi32(0x0f);
  const __m256i b0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs)));
  const __m256i b1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8)));
  q[0] = _mm256_and_si256(b0, mask);
  q[1] = _mm256_and_si256(b1, mask);
  q[2] = _mm256_srli_epi32(b0, 4);
  q[3] = _mm256_srli_epi32(b1, 4);
}

// ORs the fifth bit of element e (bit e of qh) into q as 16.
inline void fifth_bits(uint32_t qh, __m256i q[4]) {
  const __m256i bits = _mm256_set1_epi32(static_cast<int>(qh));
  const __m256i one = _mm256_set1_epi32(1);
  for (int t = 0; t < 4; ++t) {
    const __m256i shift =
        _mm256_setr_epi32(8 * t, 8 * t + 1, 8 * t + 2, 8 * t + 3, 8 * t + 4, 8 * t + 5, 8 * t + 6, 8 * t + 7);
    const __m256i h = _mm256_and_si256(_mm256_srlv_epi32(bits, shift), one);
    q[t] = _mm256_or_si256(q[t], _mm256_slli_epi32(h, 4));
  }
}

// w[t] = q[t] * d + off
inline void scale_offset(const __m256i q[4], float d, float off, __m256 w[4]) {
  const __m256 dv = _mm256_set1_ps(d), ov = _mm256_set1_ps(off);
  for (int t = 0; t < 4; ++t) w[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q[t]), dv, ov);
}
#endif

// Scalar counterpart of nibbles_split (+ fifth_bits when qh is given).
inline void nibbles_split(const uint8_t* qs, const uint32_t* qh, int q[32]) {
  for (int j = 0; j < 16; ++j) {
    q[j] = qs[j] & 0x0f;
    q[j + 16] = qs[j] >> 4;
  }
  if (qh)
    for (int j = 0; j < 32; ++j) q[j] |= static_cast<int>((*qh >> j) & 1u) << 4;
}

inline void scale_offset(const int q[32], float d, float off, float w[32]) {
  for (int j = 0; j < 32; ++j) w[j] = static_cast<float>(q[j]) * d + off;
}

// block_q8_0 (34 bytes): f16 d; i8 qs[32]; value q * d.
struct Q8_0 {
  static constexpr int kElems = 32, kBytes = 34;
  static void decode(const uint8_t* b, int, float w[32]) {
    const float d = half(b);
    const auto* qs = reinterpret_cast<const int8_t*>(b + 2);
    for (int j = 0; j < 32; ++j) w[j] = static_cast<float>(qs[j]) * d;
  }
#if AGENTKV_AVX2
  static void decode(const uint8_t* b, int, __m256 w[4]) {
    const __m256 d = _mm256_set1_ps(half(b));
    for (int t = 0; t < 4; ++t) {
      const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * t));
      w[t] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)), d);
    }
  }
#endif
};

// block_q4_0 (18 bytes): f16 d; u8 qs[16]; value (q - 8) * d. -8d is exact,
// so q * d - 8d rounds like (q - 8) * d.
struct Q4_0 {
  static constexpr int kElems = 32, kBytes = 18;
  template <typename W>
  static void decode(const uint8_t* b, int, W* w) {
    const float d = half(b);
    decode_q(b + 2, nullptr, d, -8.0f * d, w);
  }
  static void decode_q(const uint8_t* qs, const uint32_t* qh, float d, float off, float* w) {
    int q[32];
    nibbles_split(qs, qh, q);
    scale_offset(q, d, off, w);
  }
#if AGENTKV_AVX2
  static void decode_q(const uint8_t* qs, const uint32_t* qh, float d, float off, __m256* w) {
    __m256i q[4];
    nibbles_split(qs, q);
    if (qh) fifth_bits(*qh, q);
    scale_offset(q, d, off, w);
  }
#endif
};

// block_q4_1 (20 bytes): f16 d, f16 m; u8 qs[16]; value q * d + m.
struct Q4_1 {
  static constexpr int kElems = 32, kBytes = 20;
  template <typename W>
  static void decode(const uint8_t* b, int, W* w) {
    Q4_0::decode_q(b + 4, nullptr, half(b), half(b + 2), w);
  }
};

// block_q5_0 (22 bytes): f16 d; u32 qh; u8 qs[16]; value (q - 16) * d.
struct Q5_0 {
  static constexpr int kElems = 32, kBytes = 22;
  template <typename W>
  static void decode(const uint8_t* b, int, W* w) {
    const float d = half(b);
    const uint32_t qh = load_u32(b + 2);
    Q4_0::decode_q(b + 6, &qh, d, -16.0f * d, w);
  }
};

// block_q5_1 (24 bytes): f16 d, f16 m; u32 qh; u8 qs[16]; value q * d + m.
struct Q5_1 {
  static constexpr int kElems = 32, kBytes = 24;
  template <typename W>
  static void decode(const uint8_t* b, int, W* w) {
    const uint32_t qh = load_u32(b + 4);
    Q4_0::decode_q(b + 8, &qh, half(b), half(b + 2), w);
  }
};

// block_q4_K (144 bytes): f16 d, f16 dmin; u8 scales[12]; u8 qs[128]. Group
// s takes the low (even s) or high (odd s) nibbles of qs[32 (s/2) ...+31];
// value (d * sc) * q - dmin * mn with the 6-bit (sc, mn) of group s packed
// as in dequant_k.cpp.
struct Q4_K {
  static constexpr int kElems = 256, kBytes = 144;
  static void scale_min(const uint8_t* b, int s, float* d, float* off) {
    const uint8_t* sc = b + 4;
    int scale, mn;
    if (s < 4) {
      scale = sc[s] & 63;
      mn = sc[s + 4] & 63;
    } else {
      scale = (sc[s + 4] & 0x0f) | ((sc[s - 4] >> 6) << 4);
      mn = (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
    }
    *d = half(b) * static_cast<float>(scale);
    *off = -(half(b + 2) * static_cast<float>(mn));
  }
  static void decode(const uint8_t* b, int s, float w[32]) {
    float d, off;
    scale_min(b, s, &d, &off);
    const uint8_t* q = b + 16 + 32 * (s / 2);
    const int shift = 4 * (s & 1);
    for (int j = 0; j < 32; ++j) w[j] = static_cast<float>((q[j] >> shift) & 0x0f) * d + off;
  }
#if AGENTKV_AVX2
  static void decode(const uint8_t* b, int s, __m256 w[4]) {
    float d, off;
    scale_min(b, s, &d, &off);
    const uint8_t* q = b + 16 + 32 * (s / 2);
    const __m128i shift = _mm_cvtsi32_si128(4 * (s & 1));
    const __m256i mask = _mm256_set1_epi32(0x0f);
    __m256i qi[4];
    for (int t = 0; t < 4; ++t) {
      const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8 * t)));
      qi[t] = _mm256_and_si256(_mm256_srl_epi32(v, shift), mask);
    }
    scale_offset(qi, d, off, w);
  }
#endif
};

// block_q5_K (176 bytes): f16 d, f16 dmin; u8 scales[12]; u8 qh[32]; u8
// qs[128]. Group s: q4_K's nibbles of qs[32 (s/2) ...] (at byte 48), with
// bit s of qh[e] as element e's fifth bit; value (d * sc) * q - dmin * mn,
// the (sc, mn) packed as q4_K's.
struct Q5_K {
  static constexpr int kElems = 256, kBytes = 176;
  static void decode(const uint8_t* b, int s, float w[32]) {
    float d, off;
    Q4_K::scale_min(b, s, &d, &off);
    const uint8_t* q = b + 48 + 32 * (s / 2);
    const int shift = 4 * (s & 1);
    for (int j = 0; j < 32; ++j) {
      const int v = ((q[j] >> shift) & 0x0f) | ((b[16 + j] >> s) & 1) << 4;
      w[j] = static_cast<float>(v) * d + off;
    }
  }
#if AGENTKV_AVX2
  static void decode(const uint8_t* b, int s, __m256 w[4]) {
    float d, off;
    Q4_K::scale_min(b, s, &d, &off);
    const uint8_t* q = b + 48 + 32 * (s / 2);
    const __m128i shift = _mm_cvtsi32_si128(4 * (s & 1)), hshift = _mm_cvtsi32_si128(s);
    const __m256i mask = _mm256_set1_epi32(0x0f), one = _mm256_set1_epi32(1);
    __m256i qi[4];
    for (int t = 0; t < 4; ++t) {
      const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8 * t)));
      const __m256i h =
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 16 + 8 * t)));
      qi[t] = _mm256_or_si256(_mm256_and_si256(_mm256_srl_epi32(v, shift), mask),
                              _mm256_slli_epi32(_mm256_and_si256(_mm256_srl_epi32(h, hshift), one), 4));
    }
    scale_offset(qi, d, off, w);
  }
#endif
};

// block_q6_K (210 bytes): u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d. Group
// s = 4h + g takes nibble g/2 of ql[64h + 32(g%2) + l] and bits 2g, 2g+1 of
// qh[32h + l]; value (d * scales[e / 16]) * (q - 32).
struct Q6_K {
  static constexpr int kElems = 256, kBytes = 210;
  struct Group {
    const uint8_t* lo;
    const uint8_t* hi;
    int lo_shift, hi_shift;
    float da, db;  // scales of elements 0-15 and 16-31
  };
  static Group group(const uint8_t* b, int s) {
    const int h = s / 4, g = s % 4;
    const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
    const float d = half(b + 208);
    return {b + 64 * h + 32 * (g % 2),
            b + 128 + 32 * h,
            4 * (g / 2),
            2 * g,
            d * static_cast<float>(scales[2 * s]),
            d * static_cast<float>(scales[2 * s + 1])};
  }
  static void decode(const uint8_t* b, int s, float w[32]) {
    const Group gr = group(b, s);
    for (int j = 0; j < 32; ++j) {
      const int q = ((gr.lo[j] >> gr.lo_shift) & 0x0f) | (((gr.hi[j] >> gr.hi_shift) & 3) << 4);
      const float d = j < 16 ? gr.da : gr.db;
      w[j] = static_cast<float>(q) * d - 32.0f * d;
    }
  }
#if AGENTKV_AVX2
  static void decode(const uint8_t* b, int s, __m256 w[4]) {
    const Group gr = group(b, s);
    const __m128i ls = _mm_cvtsi32_si128(gr.lo_shift), hs = _mm_cvtsi32_si128(gr.hi_shift);
    const __m128i m4 = _mm_set1_epi8(0x0f), m2 = _mm_set1_epi8(3);
    for (int u = 0; u < 2; ++u) {
      __m128i l = _mm_loadu_si128(reinterpret_cast<const __m128i*>(gr.lo + 16 * u));
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(gr.hi + 16 * u));
      l = _mm_and_si128(_mm_srl_epi16(l, ls), m4);
      h = _mm_slli_epi16(_mm_and_si128(_mm_srl_epi16(h, hs), m2), 4);
      const __m128i v = _mm_or_si128(l, h);
      const float d = u == 0 ? gr.da : gr.db;
      const __m256 dv = _mm256_set1_ps(d), ov = _mm256_set1_ps(-32.0f * d);
      w[2 * u] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)), dv, ov);
      w[2 * u + 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8))), dv, ov);
    }
  }
#endif
};

}  // namespace agentkv::cpu::quant
