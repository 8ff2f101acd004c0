// Encoders of the 256-element k-quant super-blocks (QK_K = 256), q4_K, q5_K
// and q6_K, the inverse of dequant_k.cpp. Simple and deterministic: each
// sub-block's scale (and minimum) is taken from its range, then rounded *up*
// onto the 6- or 8-bit grid of the super-block's f16 scale, so the rounded
// grid still covers the sub-block and no value is clamped by more than the
// quantization step. No iterative error search (llama.cpp's make_qkx2_quants
// / make_qx_quants).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "format/fp16.h"
#include "format/quantize_impl.h"

namespace agentkv::quant {
namespace {

void store_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// Scale code for a wanted step `s` >= 0 on the grid of `d` >= 0: the smallest
// multiple of d not below s, at most `max_code` (d is rounded up from the
// largest s / max_code, so the cap only absorbs float rounding).
int scale_code(float s, float d, int max_code) {
  if (!(d > 0)) return 0;
  return std::min(max_code, static_cast<int>(std::ceil(s / d)));
}

// Inverse of dequant_k.cpp's k_scale_min: sub-blocks 0-3 in the low 6 bits of
// bytes 0-3 (scale) and 4-7 (min); sub-blocks 4-7 as nibbles of bytes 8-11
// (scale low, min high), their top two bits in bits 6-7 of bytes 0-3 (scale)
// and 4-7 (min).
void pack_scale_min(const int* sc, const int* mn, uint8_t* s) {
  std::memset(s, 0, 12);
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(sc[j] | (sc[j + 4] >> 4) << 6);
    s[j + 4] = static_cast<uint8_t>(mn[j] | (mn[j + 4] >> 4) << 6);
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0x0f) | (mn[j + 4] & 0x0f) << 4);
  }
}

// The scales, minimums and codes of one q4_K / q5_K super-block, value
// (d * sc_j) * q - dmin * m_j for sub-block j (32 values), q in [0, top]
// (top = 15 or 31):
//   lo_j = min(0, min x) (the offset -dmin * m_j cannot be positive), hi_j = max x
//   dmin = max_j(-lo_j) / 63 rounded up to f16;  m_j = ceil(-lo_j / dmin)
//   s_j = (hi_j + dmin * m_j) / top: the step that reaches hi_j from -dmin * m_j
//   d = max_j s_j / 63 rounded up to f16;         sc_j = ceil(s_j / d)
// so the sub-block's grid starts at or below lo_j and ends at or above hi_j,
// with step d * sc_j < s_j + d. Writes d and dmin (f16) at out[0..3], the 12
// scale bytes at out[4..15], and the 256 codes to q.
Status scale_min_super_block(const float* v, int top, const char* type, int64_t b, uint8_t* out, uint8_t* q) {
  float neg_lo[8], hi[8];
  float max_neg_lo = 0;
  for (int j = 0; j < 8; ++j) {
    float lo = 0, h = v[32 * j];
    for (int l = 0; l < 32; ++l) lo = std::min(lo, v[32 * j + l]), h = std::max(h, v[32 * j + l]);
    neg_lo[j] = -lo, hi[j] = h;
    max_neg_lo = std::max(max_neg_lo, neg_lo[j]);
  }
  const uint16_t dmin_h = fp16_round_up(max_neg_lo / 63.0f);
  AKV_RETURN_IF_ERROR(check_scale(dmin_h, type, "minimum scale", b));
  const float dmin = fp16_to_f32(dmin_h);
  int mn[8], sc[8];
  float offset[8], step[8];
  float max_step = 0;
  for (int j = 0; j < 8; ++j) {
    mn[j] = scale_code(neg_lo[j], dmin, 63);
    offset[j] = dmin * static_cast<float>(mn[j]);
    step[j] = std::max(0.0f, (hi[j] + offset[j]) / static_cast<float>(top));
    max_step = std::max(max_step, step[j]);
  }
  const uint16_t d_h = fp16_round_up(max_step / 63.0f);
  AKV_RETURN_IF_ERROR(check_scale(d_h, type, "scale", b));
  const float d = fp16_to_f32(d_h);
  for (int j = 0; j < 8; ++j) sc[j] = scale_code(step[j], d, 63);
  store_u16(out, d_h);
  store_u16(out + 2, dmin_h);
  pack_scale_min(sc, mn, out + 4);
  for (int j = 0; j < 8; ++j) {
    // As the decoder: y = (d * sc) * q - dmin * m.
    const float dj = d * static_cast<float>(sc[j]);
    for (int l = 0; l < 32; ++l) {
      const int e = 32 * j + l;
      q[e] = static_cast<uint8_t>(dj > 0 ? round_clamp((v[e] + offset[j]) / dj, 0, top) : 0);
    }
  }
  return Status::ok();
}

// The low four bits of the codes as q4_K / q5_K keep them: sub-block 2c in the
// low nibbles of qs[32c .. 32c+31], sub-block 2c+1 in their high nibbles.
void pack_k_nibbles(const uint8_t* q, uint8_t* qs) {
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      qs[32 * c + l] = static_cast<uint8_t>((q[64 * c + l] & 0x0f) | (q[64 * c + 32 + l] & 0x0f) << 4);
    }
  }
}

}  // namespace

// block_q4_K (144 bytes): f16 d, f16 dmin; u8 scales[12]; u8 qs[128]; codes
// in [0, 15] (scale_min_super_block).
Status encode_q4_k(const float* v, int64_t n_blocks, uint8_t* out) {
  for (int64_t b = 0; b < n_blocks; ++b, v += 256, out += 144) {
    uint8_t q[256];
    AKV_RETURN_IF_ERROR(scale_min_super_block(v, 15, "q4_K", b, out, q));
    pack_k_nibbles(q, out + 16);
  }
  return Status::ok();
}

// block_q5_K (176 bytes): f16 d, f16 dmin; u8 scales[12]; u8 qh[32];
// u8 qs[128]; codes in [0, 31] (scale_min_super_block), their low four bits
// as q4_K's and the fifth bit of element l of sub-block j in bit j of qh[l].
Status encode_q5_k(const float* v, int64_t n_blocks, uint8_t* out) {
  for (int64_t b = 0; b < n_blocks; ++b, v += 256, out += 176) {
    uint8_t q[256];
    AKV_RETURN_IF_ERROR(scale_min_super_block(v, 31, "q5_K", b, out, q));
    uint8_t* qh = out + 16;
    for (int j = 0; j < 8; ++j) {
      for (int l = 0; l < 32; ++l) qh[l] = static_cast<uint8_t>(qh[l] | ((q[32 * j + l] >> 4) & 1) << j);
    }
    pack_k_nibbles(q, out + 48);
  }
  return Status::ok();
}

// block_q6_K (210 bytes): u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; value
// (d * sc_j) * (q - 32) for sub-block j (16 values), q in [0, 63].
//   s_j = vmax_j / -32, vmax_j the value of largest magnitude (sign kept), as
//         q4_0: vmax_j takes q - 32 = -32, the other sign reaches +31 steps
//   d = max_j |s_j| / 127 rounded up to f16;  sc_j = sign(s_j) * ceil(|s_j| / d)
// so |d * sc_j| is in [|s_j|, |s_j| + d].
Status encode_q6_k(const float* v, int64_t n_blocks, uint8_t* out) {
  for (int64_t b = 0; b < n_blocks; ++b, v += 256, out += 210) {
    float s[16];
    float max_s = 0;
    for (int j = 0; j < 16; ++j) {
      float vmax = 0;
      for (int l = 0; l < 16; ++l) {
        if (std::fabs(v[16 * j + l]) > std::fabs(vmax)) vmax = v[16 * j + l];
      }
      s[j] = vmax / -32.0f;
      max_s = std::max(max_s, std::fabs(s[j]));
    }
    const uint16_t d_h = fp16_round_up(max_s / 127.0f);
    AKV_RETURN_IF_ERROR(check_scale(d_h, "q6_K", "scale", b));
    const float d = fp16_to_f32(d_h);
    uint8_t* ql = out;
    uint8_t* qh = out + 128;
    uint8_t* scales = out + 192;
    store_u16(out + 208, d_h);
    for (int j = 0; j < 16; ++j) {
      const int code = scale_code(std::fabs(s[j]), d, 127);
      const int sc = s[j] < 0 ? -code : code;
      scales[j] = static_cast<uint8_t>(static_cast<int8_t>(sc));
      const float dj = d * static_cast<float>(sc);
      for (int l = 0; l < 16; ++l) {
        const int e = 16 * j + l;
        const int q = (dj != 0 ? round_clamp(v[e] / dj, -32, 31) : 0) + 32;
        // Element e = 128h + 32g + i: low nibble in nibble g/2 of
        // ql[64h + 32(g%2) + i], top two bits in bits 2g..2g+1 of qh[32h + i].
        const int h = e / 128, g = (e % 128) / 32, i = e % 32;
        uint8_t& lo = ql[64 * h + 32 * (g % 2) + i];
        uint8_t& hi = qh[32 * h + i];
        lo = static_cast<uint8_t>(lo | (q & 0x0f) << (4 * (g / 2)));
        hi = static_cast<uint8_t>(hi | (q >> 4) << (2 * g));
      }
    }
  }
  return Status::ok();
}

}  // namespace agentkv::quant
