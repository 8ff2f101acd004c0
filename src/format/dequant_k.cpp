// Dequantization of the 256-element "k-quant" super-blocks (ggml-common.h,
// QK_K = 256). Each super-block holds sub-blocks with their own 6- or 8-bit
// scales, themselves scaled by the f16 super-block scale.
#include "format/dequant_impl.h"
#include "format/fp16.h"

namespace agentkv::dequant {
namespace {

// The 12 scale bytes of q4_K / q5_K pack eight 6-bit scales and eight 6-bit
// mins: sub-blocks 0-3 in the low 6 bits of bytes 0-3 (scale) and 4-7 (min);
// sub-blocks 4-7 in the nibbles of bytes 8-11, with their top two bits in
// the top two bits of bytes 0-3 (scale) and 4-7 (min).
inline void k_scale_min(const uint8_t* s, int j, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

}  // namespace

// block_q4_K (144 bytes): f16 d, f16 dmin; u8 scales[12]; u8 qs[128].
// Sub-block 2c takes the low nibbles of qs[32c .. 32c+31], sub-block 2c+1
// their high nibbles; value (d * sc) * q - (dmin * m).
void q4_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 144, dst += 256) {
    const float d = load_fp16(src);
    const float dmin = load_fp16(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qs = src + 16;
    for (int c = 0; c < 4; ++c) {
      int sc0, m0, sc1, m1;
      k_scale_min(scales, 2 * c, &sc0, &m0);
      k_scale_min(scales, 2 * c + 1, &sc1, &m1);
      const float d0 = d * static_cast<float>(sc0), mm0 = dmin * static_cast<float>(m0);
      const float d1 = d * static_cast<float>(sc1), mm1 = dmin * static_cast<float>(m1);
      const uint8_t* q = qs + 32 * c;
      float* y = dst + 64 * c;
      for (int l = 0; l < 32; ++l) {
        y[l] = d0 * static_cast<float>(q[l] & 0x0f) - mm0;
        y[l + 32] = d1 * static_cast<float>(q[l] >> 4) - mm1;
      }
    }
  }
}

// block_q5_K (176 bytes): f16 d, f16 dmin; u8 scales[12]; u8 qh[32];
// u8 qs[128]. As q4_K, plus the 5th bit of element l of sub-block k in bit k
// of qh[l].
void q5_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 176, dst += 256) {
    const float d = load_fp16(src);
    const float dmin = load_fp16(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qh = src + 16;
    const uint8_t* qs = src + 48;
    for (int c = 0; c < 4; ++c) {
      int sc0, m0, sc1, m1;
      k_scale_min(scales, 2 * c, &sc0, &m0);
      k_scale_min(scales, 2 * c + 1, &sc1, &m1);
      const float d0 = d * static_cast<float>(sc0), mm0 = dmin * static_cast<float>(m0);
      const float d1 = d * static_cast<float>(sc1), mm1 = dmin * static_cast<float>(m1);
      const uint8_t* q = qs + 32 * c;
      float* y = dst + 64 * c;
      const int s0 = 2 * c, s1 = 2 * c + 1;
      for (int l = 0; l < 32; ++l) {
        const int h0 = ((qh[l] >> s0) & 1) << 4;
        const int h1 = ((qh[l] >> s1) & 1) << 4;
        y[l] = d0 * static_cast<float>((q[l] & 0x0f) | h0) - mm0;
        y[l + 32] = d1 * static_cast<float>((q[l] >> 4) | h1) - mm1;
      }
    }
  }
}

// block_q6_K (210 bytes): u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d.
// In half h (128 elements), group g (32 elements) takes nibble g/2 of
// ql[64h + 32(g%2) + l] and bits 2g..2g+1 of qh[32h + l]; value
// (d * scales[e/16]) * (q - 32).
void q6_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 210, dst += 256) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const int8_t* scales = reinterpret_cast<const int8_t*>(src + 192);
    const float d = load_fp16(src + 208);
    for (int h = 0; h < 2; ++h) {
      for (int g = 0; g < 4; ++g) {
        const uint8_t* lo = ql + 64 * h + 32 * (g % 2);
        const uint8_t* hi = qh + 32 * h;
        const int lo_shift = 4 * (g / 2), hi_shift = 2 * g;
        float* y = dst + 128 * h + 32 * g;
        const int si = (128 * h + 32 * g) / 16;
        const float da = d * static_cast<float>(scales[si]);
        const float db = d * static_cast<float>(scales[si + 1]);
        for (int l = 0; l < 16; ++l) {
          const int q = (((lo[l] >> lo_shift) & 0x0f) | (((hi[l] >> hi_shift) & 3) << 4)) - 32;
          y[l] = da * static_cast<float>(q);
        }
        for (int l = 16; l < 32; ++l) {
          const int q = (((lo[l] >> lo_shift) & 0x0f) | (((hi[l] >> hi_shift) & 3) << 4)) - 32;
          y[l] = db * static_cast<float>(q);
        }
      }
    }
  }
}

}  // namespace agentkv::dequant
