// The weight blocks of the q8 path (matmul_q8.h), seen as 32-element
// sub-blocks: a file block (kBytes) holds kSub of them (1, or 8 in a K-type
// super-block of 256). Sub-block j's elements are unsigned bytes
// u = wq + kKappa (the unsigned-by-signed product vpdpbusd takes), with
//  - a scale dw and a minimum mw (kMin): value dw * wq + mw. q4_K's
//    dw = d * sc and mw = -(dmin * mn) are exact in f32 (11 by 6 bits), so
//    q4_K is q4_1's rule with per-sub-block scales;
//  - or (kSplit, q6_K) two signed integer scales, one per 16 elements, and
//    dw = d: value dw * sc * wq. The integer sum is
//    sc_lo * sum_lo(wq q) + sc_hi * sum_hi(wq q), exact in int32 (at most
//    2 * 128 * 16 * 32 * 127 < 2^24).
// Layouts as in src/format/dequant.cpp and dequant_k.cpp (matmul_quant_blocks.h
// reads them too). Where a type keeps its bytes is said here (the kernels'
// SIMD readers take the offsets kDOff, kMOff and kScOff), except q8_0's
// bytes at 2, which the kernels read themselves (signed without VNNI).
#pragma once

#include <cstdint>

#include "backend/cpu/matmul_quant_blocks.h"
#include "backend/cpu/simd.h"

namespace agentkv::cpu::q8b {

using quant::half;

// ggml type ids (format/ggml_type.h); the backend does not link the format module.
enum : uint32_t { kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14 };

// Defaults of the traits below.
struct Plain {
  static constexpr int kSub = 1;
  // Byte offsets of the f16 scale d, of the f16 minimum or dmin, and of a K
  // type's 12 bytes of 6-bit scales.
  static constexpr int kDOff = 0, kMOff = 2, kScOff = 4;
  static constexpr bool kMin = false, kSplit = false;
  // kPairLoads: the 32-element types of 4-bit pairs (kQs: their offset)
  // whose direct kernels read two blocks per load; kQh: q5's fifth bits.
  static constexpr bool kPairLoads = false;
  static constexpr int kQh = -1;
  static float mw(const uint8_t*, int) { return 0.0f; }
};

#if AGENTKV_AVX2
// 16 bytes of 4-bit pairs as 32 bytes: low nibbles are elements 0-15, high
// nibbles 16-31.
inline __m256i nibbles32(const uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0f));
}
// Byte e = 16 where bit e of qh is set, else 0.
inline __m256i fifth_bits32(uint32_t qh) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(qh)),
      _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}
#endif

inline int nibble_at(const uint8_t* qs, int e) { return e < 16 ? qs[e] & 0x0f : qs[e - 16] >> 4; }

// block_q4_0 (18 bytes): f16 d; u8 qs[16]; wq = q - 8.
struct W4_0 : Plain {
  static constexpr int kBytes = 18, kKappa = 8, kQs = 2;
  static constexpr bool kPairLoads = true;  // direct kernels read two blocks per load
  static int u8_at(const uint8_t* b, int, int e) { return nibble_at(b + 2, e); }
  static float dw(const uint8_t* b, int) { return half(b); }
#if AGENTKV_AVX2
  static __m256i u8(const uint8_t* b, int) { return nibbles32(b + 2); }
#endif
};
// block_q4_1 (20 bytes): f16 d, f16 m; u8 qs[16]; wq = q.
struct W4_1 : Plain {
  static constexpr int kBytes = 20, kKappa = 0, kQs = 4;
  static constexpr bool kMin = true, kPairLoads = true;
  static int u8_at(const uint8_t* b, int, int e) { return nibble_at(b + 4, e); }
  static float dw(const uint8_t* b, int) { return half(b); }
  static float mw(const uint8_t* b, int) { return half(b + 2); }
#if AGENTKV_AVX2
  static __m256i u8(const uint8_t* b, int) { return nibbles32(b + 4); }
#endif
};
// block_q5_0 (22 bytes): f16 d; u32 qh; u8 qs[16]; wq = q - 16, bit e of
// qh the fifth bit of element e.
struct W5_0 : Plain {
  static constexpr int kBytes = 22, kKappa = 16, kQs = 6, kQh = 2;
  static constexpr bool kPairLoads = true;
  static int u8_at(const uint8_t* b, int, int e) {
    return nibble_at(b + 6, e) | static_cast<int>((load_u32(b + 2) >> e) & 1u) << 4;
  }
  static float dw(const uint8_t* b, int) { return half(b); }
#if AGENTKV_AVX2
  static __m256i u8(const uint8_t* b, int) {
    return _mm256_or_si256(nibbles32(b + 6), fifth_bits32(load_u32(b + 2)));
  }
#endif
};
// block_q5_1 (24 bytes): f16 d, f16 m; u32 qh; u8 qs[16]; wq = q.
struct W5_1 : Plain {
  static constexpr int kBytes = 24, kKappa = 0, kQs = 8, kQh = 4;
  static constexpr bool kMin = true, kPairLoads = true;
  static int u8_at(const uint8_t* b, int, int e) {
    return nibble_at(b + 8, e) | static_cast<int>((load_u32(b + 4) >> e) & 1u) << 4;
  }
  static float dw(const uint8_t* b, int) { return half(b); }
  static float mw(const uint8_t* b, int) { return half(b + 2); }
#if AGENTKV_AVX2
  static __m256i u8(const uint8_t* b, int) {
    return _mm256_or_si256(nibbles32(b + 8), fifth_bits32(load_u32(b + 4)));
  }
#endif
};
// block_q8_0 (34 bytes): f16 d; i8 qs[32]; wq = q (the kernels read the
// bytes themselves: without VNNI they stay signed).
struct W8_0 : Plain {
  static constexpr int kBytes = 34, kKappa = 128;
  static int u8_at(const uint8_t* b, int, int e) { return static_cast<int8_t>(b[2 + e]) + 128; }
  static float dw(const uint8_t* b, int) { return half(b); }
};
// block_q4_K (144 bytes): f16 d, f16 dmin; u8 scales[12]; u8 qs[128].
// Sub-block j: the low (even j) or high (odd j) nibbles of qs[32 (j/2) ...];
// wq = q, dw = d * sc_j, mw = -(dmin * mn_j).
struct W4_K : Plain {
  static constexpr int kBytes = 144, kKappa = 0, kSub = 8;
  static constexpr bool kMin = true;
  static int u8_at(const uint8_t* b, int j, int e) {
    return (b[16 + 32 * (j / 2) + e] >> (4 * (j & 1))) & 0x0f;
  }
  static float dw(const uint8_t* b, int j) {
    float d, m;
    quant::Q4_K::scale_min(b, j, &d, &m);
    return d;
  }
  static float mw(const uint8_t* b, int j) {
    float d, m;
    quant::Q4_K::scale_min(b, j, &d, &m);
    return m;
  }
#if AGENTKV_AVX2
  static __m256i u8(const uint8_t* b, int j) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16 + 32 * (j / 2)));
    return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(4 * (j & 1))), _mm256_set1_epi8(0x0f));
  }
  // Sub-blocks j and j + 1 (j even): the low and high nibbles of one load.
  static void u8_pair(const uint8_t* b, int j, __m256i* v0, __m256i* v1) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16 + 16 * j));
    *v0 = _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
    *v1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f));
  }
#endif
};
// block_q5_K (176 bytes): f16 d, f16 dmin; u8 scales[12]; u8 qh[32]; u8
// qs[128]. Sub-block j: q4_K's nibbles (qs at byte 48) with bit j of qh[e]
// as element e's fifth bit; dw and mw as q4_K's.
struct W5_K : W4_K {
  static constexpr int kBytes = 176;
  static int u8_at(const uint8_t* b, int j, int e) {
    return ((b[48 + 32 * (j / 2) + e] >> (4 * (j & 1))) & 0x0f) | ((b[16 + e] >> j) & 1) << 4;
  }
#if AGENTKV_AVX2
  static __m256i u8(const uint8_t* b, int j) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 48 + 32 * (j / 2)));
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
    const __m256i lo =
        _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(4 * (j & 1))), _mm256_set1_epi8(0x0f));
    const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(j)), _mm256_set1_epi8(1));
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
  }
  static void u8_pair(const uint8_t* b, int j, __m256i* v0, __m256i* v1) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 48 + 16 * j));
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    const __m256i h0 = _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(j)), one);
    const __m256i h1 = _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(j + 1)), one);
    *v0 = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_slli_epi16(h0, 4));
    *v1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), _mm256_slli_epi16(h1, 4));
  }
#endif
};

// block_q6_K (210 bytes): u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d.
// Sub-block j = 4h + g: nibble g/2 of ql[64h + 32(g%2) + e] and bits 2g,
// 2g+1 of qh[32h + e]; wq = q - 32; scales[2j] for elements 0-15,
// scales[2j + 1] for 16-31; dw = d.
struct W6_K : Plain {
  static constexpr int kBytes = 210, kKappa = 32, kSub = 8;
  static constexpr bool kSplit = true;
  static int u8_at(const uint8_t* b, int j, int e) {
    const int h = j / 4, g = j % 4;
    return ((b[64 * h + 32 * (g % 2) + e] >> (4 * (g / 2))) & 0x0f) | ((b[128 + 32 * h + e] >> (2 * g)) & 3)
                                                                          << 4;
  }
  static constexpr int kDOff = 208;
  static float dw(const uint8_t* b, int) { return half(b + kDOff); }
  static int sc_lo(const uint8_t* b, int j) { return static_cast<int8_t>(b[192 + 2 * j]); }
  static int sc_hi(const uint8_t* b, int j) { return static_cast<int8_t>(b[192 + 2 * j + 1]); }
#if AGENTKV_AVX2
  static __m256i u8(const uint8_t* b, int j) {
    const int h = j / 4, g = j % 4;
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * h + 32 * (g % 2)));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h));
    const __m256i l4 =
        _mm256_and_si256(_mm256_srl_epi16(lo, _mm_cvtsi32_si128(4 * (g / 2))), _mm256_set1_epi8(0x0f));
    const __m256i h2 = _mm256_and_si256(_mm256_srl_epi16(hi, _mm_cvtsi32_si128(2 * g)), _mm256_set1_epi8(3));
    return _mm256_or_si256(l4, _mm256_slli_epi16(h2, 4));
  }
#endif
};

// Sub-block j's scale and minimum (the types with one: kMin), with one
// decode of q4_K's and q5_K's packed pair.
template <class T>
inline void dw_mw(const uint8_t* b, int j, float* dw, float* mw) {
  static_assert(T::kMin);
  if constexpr (T::kSub > 1) {
    quant::Q4_K::scale_min(b, j, dw, mw);
  } else {
    *dw = T::dw(b, j);
    *mw = T::mw(b, j);
  }
}

// The file block holding 32-element block b of a row, and b's index in it.
template <class T>
inline const uint8_t* block_of(const uint8_t* row, int64_t b) {
  return row + (b / T::kSub) * T::kBytes;
}
template <class T>
inline int sub_of(int64_t b) {
  return static_cast<int>(b % T::kSub);
}

// f(T{}) for the q8 path's type id, or false where it has none.
template <class F>
inline bool with_type(uint32_t type, F&& f) {
  switch (type) {
    case kQ4_0:
      return f(W4_0{}), true;
    case kQ4_1:
      return f(W4_1{}), true;
    case kQ5_0:
      return f(W5_0{}), true;
    case kQ5_1:
      return f(W5_1{}), true;
    case kQ8_0:
      return f(W8_0{}), true;
    case kQ4_K:
      return f(W4_K{}), true;
    case kQ5_K:
      return f(W5_K{}), true;
    case kQ6_K:
      return f(W6_K{}), true;
    default:
      return false;
  }
}

}  // namespace agentkv::cpu::q8b
