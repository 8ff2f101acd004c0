// Encoders of the plain types and the 32-element block formats, and the
// dispatch behind quantize_values. Each writes the block layout its decoder in
// dequant.cpp reads (ggml-common.h); quantize_k.cpp has the k-quants.
#include "format/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "format/quantize_impl.h"

namespace agentkv {
namespace quant {

uint16_t fp16_round_down(float x) {
  const uint16_t h = f32_to_fp16(x);
  if (fp16_to_f32(h) <= x) return h;
  // One half-step toward -inf. Halves of one sign are ordered like their bit
  // patterns; -0 (0x8000) steps to the smallest negative subnormal, and the
  // most negative finite half to -inf.
  if (h & 0x8000) return static_cast<uint16_t>(h + 1);
  return h == 0 ? uint16_t{0x8001} : static_cast<uint16_t>(h - 1);
}

uint16_t fp16_round_up(float x) { return fp16_round_down(-x) ^ 0x8000; }

Status check_scale(uint16_t h, const char* type, const char* what, int64_t block) {
  if ((h & 0x7c00) != 0x7c00) return Status::ok();
  return make_error(ErrorCode::kInvalidArgument, "cannot encode ", type, ": block ", block, " needs a ", what,
                    " outside f16's range (values too large)");
}

int round_clamp(float t, int lo, int hi) {
  if (!(t > static_cast<float>(lo))) return lo;  // also NaN
  if (t >= static_cast<float>(hi)) return hi;
  return static_cast<int>(std::lround(t));
}

}  // namespace quant

namespace {

using quant::check_scale;
using quant::round_clamp;

void store_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
void store_u32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }

// The 32-element formats keep the low four bits of element j in the low
// nibble of qs[j] and those of element j + 16 in its high nibble; q5_*'s fifth
// bits go to bit j of a u32.
void pack_nibbles(const uint8_t* q, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 0x0f) | (q[j + 16] & 0x0f) << 4);
}
uint32_t fifth_bits(const uint8_t* q) {
  uint32_t qh = 0;
  for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  return qh;
}

// q4_0 / q5_0 (value (q - half) * d, half = 2^(bits-1)): as ggml's reference,
// d = vmax / -half with vmax the value of largest magnitude, sign kept, so
// vmax takes code 0; values of the other sign reach half - 1 steps, and one
// there beyond half - 0.5 steps is clamped (error at most one step). Codes
// are rounded against the stored (f16) d.
Status symmetric_block(const float* x, int bits, const char* type, int64_t b, uint16_t* dh, uint8_t* q) {
  const int half = 1 << (bits - 1);
  float vmax = 0;
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > std::fabs(vmax)) vmax = x[j];
  }
  *dh = f32_to_fp16(vmax / static_cast<float>(-half));
  AKV_RETURN_IF_ERROR(check_scale(*dh, type, "scale", b));
  const float d = fp16_to_f32(*dh);
  for (int j = 0; j < 32; ++j) {
    q[j] = static_cast<uint8_t>(d != 0 ? round_clamp(x[j] / d, -half, half - 1) + half : half);
  }
  return Status::ok();
}

// q4_1 / q5_1 (value q * d + m, q in [0, top], top = 2^bits - 1): m is the
// minimum rounded down to f16 and d = (max - m) / top rounded up, so the grid
// m + d * [0, top] covers [min, max] and every value is within half a step.
Status affine_block(const float* x, int bits, const char* type, int64_t b, uint16_t* dh, uint16_t* mh,
                    uint8_t* q) {
  const int top = (1 << bits) - 1;
  float lo = x[0], hi = x[0];
  for (int j = 1; j < 32; ++j) lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
  *mh = quant::fp16_round_down(lo);
  AKV_RETURN_IF_ERROR(check_scale(*mh, type, "minimum", b));
  const float m = fp16_to_f32(*mh);
  *dh = quant::fp16_round_up((hi - m) / static_cast<float>(top));
  AKV_RETURN_IF_ERROR(check_scale(*dh, type, "scale", b));
  const float d = fp16_to_f32(*dh);
  for (int j = 0; j < 32; ++j) q[j] = static_cast<uint8_t>(d > 0 ? round_clamp((x[j] - m) / d, 0, top) : 0);
  return Status::ok();
}

// block_q4_0 (18 bytes): f16 d; u8 qs[16].
Status encode_q4_0(const float* v, int64_t nb, uint8_t* out) {
  for (int64_t b = 0; b < nb; ++b, v += 32, out += 18) {
    uint16_t d;
    uint8_t q[32];
    AKV_RETURN_IF_ERROR(symmetric_block(v, 4, "q4_0", b, &d, q));
    store_u16(out, d);
    pack_nibbles(q, out + 2);
  }
  return Status::ok();
}

// block_q4_1 (20 bytes): f16 d, f16 m; u8 qs[16].
Status encode_q4_1(const float* v, int64_t nb, uint8_t* out) {
  for (int64_t b = 0; b < nb; ++b, v += 32, out += 20) {
    uint16_t d, m;
    uint8_t q[32];
    AKV_RETURN_IF_ERROR(affine_block(v, 4, "q4_1", b, &d, &m, q));
    store_u16(out, d);
    store_u16(out + 2, m);
    pack_nibbles(q, out + 4);
  }
  return Status::ok();
}

// block_q5_0 (22 bytes): f16 d; u32 qh; u8 qs[16].
Status encode_q5_0(const float* v, int64_t nb, uint8_t* out) {
  for (int64_t b = 0; b < nb; ++b, v += 32, out += 22) {
    uint16_t d;
    uint8_t q[32];
    AKV_RETURN_IF_ERROR(symmetric_block(v, 5, "q5_0", b, &d, q));
    store_u16(out, d);
    store_u32(out + 2, fifth_bits(q));
    pack_nibbles(q, out + 6);
  }
  return Status::ok();
}

// block_q5_1 (24 bytes): f16 d, f16 m; u32 qh; u8 qs[16].
Status encode_q5_1(const float* v, int64_t nb, uint8_t* out) {
  for (int64_t b = 0; b < nb; ++b, v += 32, out += 24) {
    uint16_t d, m;
    uint8_t q[32];
    AKV_RETURN_IF_ERROR(affine_block(v, 5, "q5_1", b, &d, &m, q));
    store_u16(out, d);
    store_u16(out + 2, m);
    store_u32(out + 4, fifth_bits(q));
    pack_nibbles(q, out + 8);
  }
  return Status::ok();
}

// block_q8_0 (34 bytes): f16 d; i8 qs[32]. d = max|x| / 127, codes rounded
// against the unrounded d, as ggml's reference.
Status encode_q8_0(const float* v, int64_t nb, uint8_t* out) {
  for (int64_t b = 0; b < nb; ++b, v += 32, out += 34) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float d = amax / 127.0f;
    const float id = d > 0 ? 1.0f / d : 0.0f;
    const uint16_t dh = f32_to_fp16(d);
    AKV_RETURN_IF_ERROR(check_scale(dh, "q8_0", "scale", b));
    store_u16(out, dh);
    for (int j = 0; j < 32; ++j)
      out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::lround(v[j] * id)));
  }
  return Status::ok();
}

}  // namespace

Result<std::vector<uint8_t>> quantize_values(GgmlType type, const float* v, int64_t n) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      break;
    default:
      return make_error(ErrorCode::kUnsupported, "cannot encode ",
                        ggml_type_name(static_cast<uint32_t>(type)),
                        " (f32, f16, q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K and q6_K only)");
  }
  const GgmlTypeTraits t = *ggml_type_traits(static_cast<uint32_t>(type));
  if (n < 0 || n % t.block_elems != 0) {
    return make_error(ErrorCode::kInvalidArgument, t.name, " needs a multiple of ", t.block_elems,
                      " values, got ", n);
  }
  std::vector<uint8_t> out(static_cast<size_t>(n / t.block_elems * t.block_bytes));
  if (type == GgmlType::kF32) {
    if (n > 0) std::memcpy(out.data(), v, out.size());
    return out;
  }
  if (type == GgmlType::kF16) {
    for (int64_t i = 0; i < n; ++i) store_u16(&out[2 * i], f32_to_fp16(v[i]));
    return out;
  }
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(v[i])) {
      return make_error(ErrorCode::kInvalidArgument, "cannot encode ", t.name, ": value ", i, " is ",
                        std::isnan(v[i]) ? "NaN"
                        : v[i] > 0       ? "+inf"
                                         : "-inf");
    }
  }
  const int64_t nb = n / t.block_elems;
  Status st;
  switch (type) {
    case GgmlType::kQ4_0:
      st = encode_q4_0(v, nb, out.data());
      break;
    case GgmlType::kQ4_1:
      st = encode_q4_1(v, nb, out.data());
      break;
    case GgmlType::kQ5_0:
      st = encode_q5_0(v, nb, out.data());
      break;
    case GgmlType::kQ5_1:
      st = encode_q5_1(v, nb, out.data());
      break;
    case GgmlType::kQ8_0:
      st = encode_q8_0(v, nb, out.data());
      break;
    case GgmlType::kQ4_K:
      st = quant::encode_q4_k(v, nb, out.data());
      break;
    case GgmlType::kQ5_K:
      st = quant::encode_q5_k(v, nb, out.data());
      break;
    default:  // kQ6_K
      st = quant::encode_q6_k(v, nb, out.data());
      break;
  }
  if (!st.is_ok()) return st;
  return out;
}

}  // namespace agentkv
