// The q8 path of matmul_quant (matmul_q8.h): every kernel computes each
// block's integer sum exactly and then runs the one float order of the
// header, so a row's output does not depend on which kernel ran it.
//  - up to four rows (decode): weight blocks are read straight from the GGUF
//    layout, eight output columns at a time; the eight per-column lane sums of
//    a block are reduced into one vector of eight column sums;
//  - more rows: a panel of weight rows is re-laid once per call (into L2) so
//    that one 32-bit lane holds four consecutive bytes of one column: a
//    broadcast of four activation bytes then feeds eight columns per
//    instruction, with no reduction (llama.cpp's repacked layouts work so).
// Integer products run on AVX512-VNNI / AVX-VNNI (vpdpbusd), or its exact
// AVX2 emulation, or scalar code.
#include "backend/cpu/matmul_q8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/matmul_quant_blocks.h"
#include "backend/cpu/simd.h"

namespace agentkv::cpu {
namespace {

using quant::half;

// ggml type ids (format/ggml_type.h); the backend does not link the format module.
enum : uint32_t { kQ4_0 = 2, kQ4_1 = 3, kQ8_0 = 8 };

// A weight block as unsigned bytes u = wq + kKappa (so that u * q is the
// unsigned-by-signed product vpdpbusd takes), its scale and its minimum.
struct W4_0 {
  static constexpr int kBytes = 18, kKappa = 8;
  static constexpr bool kMin = false;
  static int u8_at(const uint8_t* b, int e) { return e < 16 ? b[2 + e] & 0x0f : b[2 + e - 16] >> 4; }
  static float mw(const uint8_t*) { return 0.0f; }
};
struct W4_1 {
  static constexpr int kBytes = 20, kKappa = 0;
  static constexpr bool kMin = true;
  static int u8_at(const uint8_t* b, int e) { return e < 16 ? b[4 + e] & 0x0f : b[4 + e - 16] >> 4; }
  static float mw(const uint8_t* b) { return half(b + 2); }
};
struct W8_0 {
  static constexpr int kBytes = 34, kKappa = 128;
  static constexpr bool kMin = false;
  static int u8_at(const uint8_t* b, int e) { return static_cast<int8_t>(b[2 + e]) + 128; }
  static float mw(const uint8_t*) { return 0.0f; }
};

inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

#if AGENTKV_AVX2
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
inline __m256i dpbusd(__m256i acc, __m256i u8, __m256i s8) { return _mm256_dpbusd_epi32(acc, u8, s8); }
#elif defined(__AVXVNNI__)
inline __m256i dpbusd(__m256i acc, __m256i u8, __m256i s8) { return _mm256_dpbusd_avx_epi32(acc, u8, s8); }
#else
// vpdpbusd without VNNI, exactly: products widened to int16 (|u * s| <= 32640
// fits), pairs summed to int32 by madd, pairs of pairs by hadd.
inline __m256i dpbusd(__m256i acc, __m256i u8, __m256i s8) {
  const __m256i lo = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(u8)),
                                       _mm256_cvtepi8_epi16(_mm256_castsi256_si128(s8)));
  const __m256i hi = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(u8, 1)),
                                       _mm256_cvtepi8_epi16(_mm256_extracti128_si256(s8, 1)));
  const __m256i quads = _mm256_permute4x64_epi64(_mm256_hadd_epi32(lo, hi), 0xd8);
  return _mm256_add_epi32(acc, quads);
}
#endif

template <class T>
inline __m256i block_u8(const uint8_t* b) {
  if constexpr (T::kKappa == 128) {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)),
                            _mm256_set1_epi8(static_cast<char>(0x80)));
  } else {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + (T::kMin ? 4 : 2)));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0f));
  }
}

// The f16 at byte offset off of eight blocks, as f32 lanes (F16C converts
// every binary16 exactly, as half() does).
inline __m256 halves8(const uint8_t* const blk[8], int off) {
  const __m128i h = _mm_setr_epi16(
      static_cast<short>(load_u16(blk[0] + off)), static_cast<short>(load_u16(blk[1] + off)),
      static_cast<short>(load_u16(blk[2] + off)), static_cast<short>(load_u16(blk[3] + off)),
      static_cast<short>(load_u16(blk[4] + off)), static_cast<short>(load_u16(blk[5] + off)),
      static_cast<short>(load_u16(blk[6] + off)), static_cast<short>(load_u16(blk[7] + off)));
  return _mm256_cvtph_ps(h);
}

// Lane c = the sum of t[c]'s eight lanes.
inline __m256i reduce8(const __m256i t[8]) {
  const __m256i h0 = _mm256_hadd_epi32(t[0], t[1]), h1 = _mm256_hadd_epi32(t[2], t[3]);
  const __m256i h2 = _mm256_hadd_epi32(t[4], t[5]), h3 = _mm256_hadd_epi32(t[6], t[7]);
  const __m256i g0 = _mm256_hadd_epi32(h0, h1), g1 = _mm256_hadd_epi32(h2, h3);
  return _mm256_add_epi32(_mm256_permute2x128_si256(g0, g1, 0x20), _mm256_permute2x128_si256(g0, g1, 0x31));
}

// In-place transpose of eight vectors seen as 8x8 int32.
inline void transpose8(__m256i r[8]) {
  __m256i t[8], u[8];
  for (int p = 0; p < 4; ++p) {
    t[2 * p] = _mm256_unpacklo_epi32(r[2 * p], r[2 * p + 1]);
    t[2 * p + 1] = _mm256_unpackhi_epi32(r[2 * p], r[2 * p + 1]);
  }
  for (int h = 0; h < 2; ++h) {
    u[4 * h + 0] = _mm256_unpacklo_epi64(t[4 * h], t[4 * h + 2]);
    u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h], t[4 * h + 2]);
    u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
    u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2x128_si256(u[i], u[4 + i], 0x20);
    r[4 + i] = _mm256_permute2x128_si256(u[i], u[4 + i], 0x31);
  }
}

// y[c] = v[c] or y[c] + v[c] for c < n (<= 8).
inline void store_cols(float* y, __m256 v, int n, bool accumulate) {
  if (n == 8) {
    _mm256_storeu_ps(y, accumulate ? _mm256_add_ps(_mm256_loadu_ps(y), v) : v);
    return;
  }
  alignas(32) float t[8];
  _mm256_store_ps(t, v);
  for (int c = 0; c < n; ++c) y[c] = accumulate ? y[c] + t[c] : t[c];
}

// The float steps of one block for one output row: red holds the eight
// columns' dot products of the unsigned weight bytes with the block's q.
template <class T>
inline __m256 block_step(__m256 acc, __m256i red, const Q8Acts& x, int64_t rb, __m256 dwv, __m256 mwv) {
  const __m256i isum = _mm256_sub_epi32(red, _mm256_set1_epi32(T::kKappa * x.qsum[rb]));
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dwv, _mm256_set1_ps(x.d[rb])), acc);
  if constexpr (T::kMin) acc = _mm256_fmadd_ps(mwv, _mm256_set1_ps(x.s[rb]), acc);
  return acc;
}

// Rows [0, R) of x against the nc (<= 8) weight rows starting at j, read in
// the file's layout. 4-bit types take two blocks per step: one load holds
// both blocks' 16 bytes, so one mask gives both blocks' low nibbles and one
// shift-and-mask their high ones, and one reduction gives both blocks' sums
// (half the work per block of the one-block step, which the last odd block
// and q8_0 use).
template <class T, int R>
void direct_group(const Q8Acts& x, const QuantMatrix& w, int64_t j, int nc, float* y, int64_t ldy,
                  bool accumulate) {
  const int64_t nb = w.k / 32;
  const uint8_t* rows[8];
  for (int c = 0; c < 8; ++c) rows[c] = w.data + (j + std::min(c, nc - 1)) * w.row_bytes;
  // The next group's rows (contiguous), spread over this group's block steps:
  // the 49152-row output matrix streams from memory, and eight rows read side
  // by side defeat the hardware prefetcher.
  const uint8_t* next = w.data + (j + 8) * w.row_bytes;
  const int64_t span = j + 16 <= w.n ? 8 * w.row_bytes : 0;
  const int64_t per_block = (span + nb * 64 - 1) / (nb * 64) * 64;
  auto prefetch = [&](int64_t b0, int64_t b1) {
    for (int64_t o = b0 * per_block; o < std::min(span, b1 * per_block); o += 64)
      _mm_prefetch(reinterpret_cast<const char*>(next + o), _MM_HINT_T0);
  };
  const __m256i zero = _mm256_setzero_si256();
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  int64_t b = 0;
  if constexpr (T::kKappa != 128) {
    constexpr int kQs = T::kMin ? 4 : 2;
    const __m256i mask = _mm256_set1_epi8(0x0f);
    for (; b + 2 <= nb; b += 2) {
      prefetch(b, b + 2);
      // lo[c]: elements 0-15 of block b, then of block b + 1; hi[c]: 16-31.
      __m256i lo[8], hi[8];
      const uint8_t* blk0[8];
      const uint8_t* blk1[8];
      for (int c = 0; c < 8; ++c) {
        blk0[c] = rows[c] + b * T::kBytes;
        blk1[c] = blk0[c] + T::kBytes;
        const __m256i v =
            _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk0[c] + kQs))),
                                    _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk1[c] + kQs)), 1);
        lo[c] = _mm256_and_si256(v, mask);
        hi[c] = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
      }
      const __m256 dw0 = halves8(blk0, 0), dw1 = halves8(blk1, 0);
      [[maybe_unused]] __m256 mw0, mw1;
      if constexpr (T::kMin) mw0 = halves8(blk0, 2), mw1 = halves8(blk1, 2);
      for (int r = 0; r < R; ++r) {
        const int8_t* xr = x.row_q(r) + b * 32;
        const __m256i xa = _mm256_load_si256(reinterpret_cast<const __m256i*>(xr));
        const __m256i xb = _mm256_load_si256(reinterpret_cast<const __m256i*>(xr + 32));
        const __m256i xlo = _mm256_permute2x128_si256(xa, xb, 0x20), xhi = _mm256_permute2x128_si256(xa, xb, 0x31);
        // t[c]: lanes 0-3 sum block b's products, lanes 4-7 block b + 1's.
        __m256i t[8];
        for (int c = 0; c < 8; ++c) t[c] = dpbusd(dpbusd(zero, lo[c], xlo), hi[c], xhi);
        const __m256i g0 = _mm256_hadd_epi32(_mm256_hadd_epi32(t[0], t[1]), _mm256_hadd_epi32(t[2], t[3]));
        const __m256i g1 = _mm256_hadd_epi32(_mm256_hadd_epi32(t[4], t[5]), _mm256_hadd_epi32(t[6], t[7]));
        const int64_t rb = r * nb + b;
        acc[r] = block_step<T>(acc[r], _mm256_permute2x128_si256(g0, g1, 0x20), x, rb, dw0, mw0);
        acc[r] = block_step<T>(acc[r], _mm256_permute2x128_si256(g0, g1, 0x31), x, rb + 1, dw1, mw1);
      }
    }
  }
  for (; b < nb; ++b) {
    prefetch(b, b + 1);
    __m256i wv[8];
    const uint8_t* blk[8];
    for (int c = 0; c < 8; ++c) {
      blk[c] = rows[c] + b * T::kBytes;
      wv[c] = block_u8<T>(blk[c]);
    }
    const __m256 dwv = halves8(blk, 0);
    [[maybe_unused]] __m256 mwv;
    if constexpr (T::kMin) mwv = halves8(blk, 2);
    for (int r = 0; r < R; ++r) {
      const __m256i xb = _mm256_load_si256(reinterpret_cast<const __m256i*>(x.row_q(r) + b * 32));
      __m256i t[8];
      for (int c = 0; c < 8; ++c) t[c] = dpbusd(zero, wv[c], xb);
      acc[r] = block_step<T>(acc[r], reduce8(t), x, r * nb + b, dwv, mwv);
    }
  }
  for (int r = 0; r < R; ++r) store_cols(y + r * ldy, acc[r], nc, accumulate);
}

template <class T, int R>
void direct_rows(const Q8Acts& x, const QuantMatrix& w, float* y, int64_t ldy, int64_t n0, int64_t n1,
                 bool accumulate) {
  for (int64_t j = n0; j < n1; j += 8)
    direct_group<T, R>(x, w, j, static_cast<int>(std::min<int64_t>(8, n1 - j)), y + j, ldy, accumulate);
}

// The panel of weight rows [j0, j0 + nc): per group of eight columns g and
// block b, eight vectors (q + ((g * nb + b) * 8 + i) * 32) whose lane c holds
// bytes 4i..4i+3 of column 8g + c; scales and minimums (g * nb + b) * 8 + c.
// Columns past nc are zero.
template <class T>
void build_panel(const QuantMatrix& w, int64_t j0, int64_t nc, uint8_t* q, float* dw, float* mw) {
  const int64_t nb = w.k / 32, groups = (nc + 7) / 8;
  for (int64_t g = 0; g < groups; ++g) {
    const int valid = static_cast<int>(std::min<int64_t>(8, nc - 8 * g));
    for (int64_t b = 0; b < nb; ++b) {
      __m256i r[8];
      const int64_t o = (g * nb + b) * 8;
      for (int c = 0; c < 8; ++c) {
        if (c < valid) {
          const uint8_t* blk = w.data + (j0 + 8 * g + c) * w.row_bytes + b * T::kBytes;
          r[c] = block_u8<T>(blk);
          dw[o + c] = half(blk);
          mw[o + c] = T::mw(blk);
        } else {
          r[c] = _mm256_setzero_si256();
          dw[o + c] = 0.0f;
          mw[o + c] = 0.0f;
        }
      }
      transpose8(r);
      for (int i = 0; i < 8; ++i) _mm256_store_si256(reinterpret_cast<__m256i*>(q + (o + i) * 32), r[i]);
    }
  }
}

// Rows [r0, r0 + R) against panel groups [g0, g0 + G).
template <class T, int R, int G>
void panel_tile(const Q8Acts& x, int64_t r0, const uint8_t* pq, const float* pd, const float* pm, int64_t g0,
                int64_t nc, float* y, int64_t ldy, bool accumulate) {
  const int64_t nb = x.k / 32;
  __m256 acc[R][G];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) acc[r][g] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i is[R][G];
    for (int r = 0; r < R; ++r) {
      const __m256i corr = _mm256_set1_epi32(-T::kKappa * x.qsum[(r0 + r) * nb + b]);
      for (int g = 0; g < G; ++g) is[r][g] = corr;
    }
    for (int i = 0; i < 8; ++i) {
      __m256i wv[G];
      for (int g = 0; g < G; ++g)
        wv[g] = _mm256_load_si256(reinterpret_cast<const __m256i*>(pq + (((g0 + g) * nb + b) * 8 + i) * 32));
      for (int r = 0; r < R; ++r) {
        const __m256i xb = _mm256_set1_epi32(load_i32(x.row_q(r0 + r) + b * 32 + 4 * i));
        for (int g = 0; g < G; ++g) is[r][g] = dpbusd(is[r][g], wv[g], xb);
      }
    }
    for (int g = 0; g < G; ++g) {
      const int64_t o = ((g0 + g) * nb + b) * 8;
      const __m256 dwv = _mm256_load_ps(pd + o);
      for (int r = 0; r < R; ++r) {
        const int64_t rb = (r0 + r) * nb + b;
        acc[r][g] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[r][g]), _mm256_mul_ps(dwv, _mm256_set1_ps(x.d[rb])), acc[r][g]);
        if constexpr (T::kMin) acc[r][g] = _mm256_fmadd_ps(_mm256_load_ps(pm + o), _mm256_set1_ps(x.s[rb]), acc[r][g]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) {
      const int64_t c0 = (g0 + g) * 8;
      store_cols(y + (r0 + r) * ldy + c0, acc[r][g], static_cast<int>(std::min<int64_t>(8, nc - c0)), accumulate);
    }
}

template <class T, int R>
void panel_rows(const Q8Acts& x, int64_t r0, const uint8_t* pq, const float* pd, const float* pm, int64_t nc,
                float* y, int64_t ldy, bool accumulate) {
  const int64_t groups = (nc + 7) / 8;
  int64_t g = 0;
  for (; g + 2 <= groups; g += 2) panel_tile<T, R, 2>(x, r0, pq, pd, pm, g, nc, y, ldy, accumulate);
  if (g < groups) panel_tile<T, R, 1>(x, r0, pq, pd, pm, g, nc, y, ldy, accumulate);
}

template <class T>
void gemm_type(const Q8Acts& x, const QuantMatrix& w, float* y, int64_t ldy, int64_t n0, int64_t n1,
               bool accumulate) {
  const int64_t m = x.m, nb = w.k / 32;
  if (m <= 4)
    return quant::with_rows(m, [&]<int R>() { direct_rows<T, R>(x, w, y, ldy, n0, n1, accumulate); });
  // ~128 KiB of panel (32 + 8 bytes per column and block), a multiple of 16 columns.
  const int64_t per_col = nb * 40;
  const int64_t cols = std::max<int64_t>(16, (int64_t(128) << 10) / per_col / 16 * 16);
  thread_local AlignedVector<uint8_t> pq;
  thread_local AlignedVector<float> pd, pm;
  pq.resize(size_t(cols * nb * 32));
  pd.resize(size_t(cols * nb));
  pm.resize(size_t(cols * nb));
  for (int64_t j0 = n0; j0 < n1; j0 += cols) {
    const int64_t nc = std::min(cols, n1 - j0);
    build_panel<T>(w, j0, nc, pq.data(), pd.data(), pm.data());
    float* yj = y + j0;
    int64_t r0 = 0;
    for (; r0 + 4 <= m; r0 += 4) panel_rows<T, 4>(x, r0, pq.data(), pd.data(), pm.data(), nc, yj, ldy, accumulate);
    if (r0 < m)
      quant::with_rows(m - r0, [&]<int R>() {
        panel_rows<T, R>(x, r0, pq.data(), pd.data(), pm.data(), nc, yj, ldy, accumulate);
      });
  }
}

#else  // scalar: the order of the header, one output at a time

template <class T>
void gemm_type(const Q8Acts& x, const QuantMatrix& w, float* y, int64_t ldy, int64_t n0, int64_t n1,
               bool accumulate) {
  const int64_t nb = w.k / 32;
  for (int64_t r = 0; r < x.m; ++r) {
    const int8_t* xq = x.row_q(r);
    for (int64_t j = n0; j < n1; ++j) {
      const uint8_t* row = w.data + j * w.row_bytes;
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + b * T::kBytes;
        int32_t dot = 0;
        for (int e = 0; e < 32; ++e) dot += T::u8_at(blk, e) * xq[b * 32 + e];
        const int64_t rb = r * nb + b;
        const int32_t isum = dot - T::kKappa * x.qsum[rb];
        acc = std::fma(static_cast<float>(isum), half(blk) * x.d[rb], acc);
        if constexpr (T::kMin) acc = std::fma(T::mw(blk), x.s[rb], acc);
      }
      float& out = y[r * ldy + j];
      out = accumulate ? out + acc : acc;
    }
  }
}

#endif

}  // namespace

bool q8_supports(uint32_t type) { return type == kQ4_0 || type == kQ4_1 || type == kQ8_0; }

void q8_resize(Q8Acts& a, int64_t m, int64_t k) {
  a.m = m;
  a.k = k;
  a.q.resize(size_t(m * k));
  a.d.resize(size_t(m * (k / 32)));
  a.qsum.resize(size_t(m * (k / 32)));
  a.s.resize(size_t(m * (k / 32)));
}

void q8_quantize_rows(const float* x, Q8Acts& a, int64_t r0, int64_t r1) {
  const int64_t k = a.k, nb = k / 32;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + r * k + b * 32;
      int8_t* q = a.q.data() + r * k + b * 32;
      float amax = 0.0f;
      for (int e = 0; e < 32; ++e) amax = std::max(amax, std::fabs(xb[e]));
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      int32_t sum = 0;
#if AGENTKV_AVX2
      const __m256 idv = _mm256_set1_ps(id);
      __m256i v[4];
      for (int t = 0; t < 4; ++t) {
        // cvtps rounds half to even, as std::nearbyint does below.
        v[t] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + 8 * t), idv));
      }
      const __m256i s4 = _mm256_add_epi32(_mm256_add_epi32(v[0], v[1]), _mm256_add_epi32(v[2], v[3]));
      alignas(32) int32_t lanes[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s4);
      for (int l = 0; l < 8; ++l) sum += lanes[l];
      const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                          _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
#else
      for (int e = 0; e < 32; ++e) {
        q[e] = static_cast<int8_t>(std::nearbyint(xb[e] * id));
        sum += q[e];
      }
#endif
      a.d[r * nb + b] = d;
      a.qsum[r * nb + b] = sum;
      a.s[r * nb + b] = d * static_cast<float>(sum);
    }
  }
}

void q8_gemm_rows(const Q8Acts& x, const QuantMatrix& w, float* y, int64_t ldy, int64_t n0, int64_t n1,
                  bool accumulate) {
  switch (w.type) {
    case kQ4_0:
      return gemm_type<W4_0>(x, w, y, ldy, n0, n1, accumulate);
    case kQ4_1:
      return gemm_type<W4_1>(x, w, y, ldy, n0, n1, accumulate);
    case kQ8_0:
      return gemm_type<W8_0>(x, w, y, ldy, n0, n1, accumulate);
    default:
      return;
  }
}

}  // namespace agentkv::cpu
