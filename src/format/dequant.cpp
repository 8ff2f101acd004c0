// Dequantization of the plain types and the 32-element block formats, and
// the dispatch behind dequantize_row. Block layouts follow ggml-common.h;
// the arithmetic order (scale * q + min, never fused: see CMakeLists.txt)
// matches ggml and the gguf Python package bit for bit.
#include <cstring>

#include "format/dequant_impl.h"
#include "format/fp16.h"
#include "format/ggml_type.h"

namespace agentkv {
namespace dequant {

void f32(const uint8_t* src, float* dst, int64_t n) { std::memcpy(dst, src, static_cast<size_t>(n) * 4); }

void f16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = load_fp16(src + 2 * i);
}

void bf16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(src + 2 * i));
}

// block_q4_0 (18 bytes): f16 d; u8 qs[16]. Element j is the low nibble of
// qs[j], element j+16 the high nibble; value (q - 8) * d.
void q4_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 18, dst += 32) {
    const float d = load_fp16(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>((qs[j] & 0x0f) - 8) * d;
      dst[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
    }
  }
}

// block_q4_1 (20 bytes): f16 d, f16 m; u8 qs[16]; value q * d + m.
void q4_1(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 20, dst += 32) {
    const float d = load_fp16(src);
    const float m = load_fp16(src + 2);
    const uint8_t* qs = src + 4;
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>(qs[j] & 0x0f) * d + m;
      dst[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
    }
  }
}

// block_q5_0 (22 bytes): f16 d; u32 qh (bit j = 5th bit of element j);
// u8 qs[16] as in q4_0; value (q - 16) * d.
void q5_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 22, dst += 32) {
    const float d = load_fp16(src);
    const uint32_t qh = load_u32(src + 2);
    const uint8_t* qs = src + 6;
    for (int j = 0; j < 16; ++j) {
      const int hi0 = static_cast<int>((qh >> j) & 1u) << 4;
      const int hi1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      dst[j] = static_cast<float>(((qs[j] & 0x0f) | hi0) - 16) * d;
      dst[j + 16] = static_cast<float>(((qs[j] >> 4) | hi1) - 16) * d;
    }
  }
}

// block_q5_1 (24 bytes): f16 d, f16 m; u32 qh; u8 qs[16]; value q * d + m.
void q5_1(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 24, dst += 32) {
    const float d = load_fp16(src);
    const float m = load_fp16(src + 2);
    const uint32_t qh = load_u32(src + 4);
    const uint8_t* qs = src + 8;
    for (int j = 0; j < 16; ++j) {
      const int hi0 = static_cast<int>((qh >> j) & 1u) << 4;
      const int hi1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      dst[j] = static_cast<float>((qs[j] & 0x0f) | hi0) * d + m;
      dst[j + 16] = static_cast<float>((qs[j] >> 4) | hi1) * d + m;
    }
  }
}

// block_q8_0 (34 bytes): f16 d; i8 qs[32]; value q * d.
void q8_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 34, dst += 32) {
    const float d = load_fp16(src);
    const int8_t* qs = reinterpret_cast<const int8_t*>(src + 2);
    for (int j = 0; j < 32; ++j) dst[j] = static_cast<float>(qs[j]) * d;
  }
}

}  // namespace dequant

Status dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  const uint32_t id = static_cast<uint32_t>(type);
  auto traits = ggml_type_traits(id);
  if (!traits) return make_error(ErrorCode::kUnsupported, "unknown tensor type id ", id);
  if (!traits->can_dequantize) {
    return make_error(ErrorCode::kUnsupported, "cannot dequantize type ", traits->name);
  }
  if (n < 0 || n % traits->block_elems != 0) {
    return make_error(ErrorCode::kInvalidArgument, "cannot dequantize ", n, " elements of ", traits->name,
                      ": not a multiple of its block size ", traits->block_elems);
  }
  const auto* s = static_cast<const uint8_t*>(src);
  const int64_t nb = n / traits->block_elems;
  switch (type) {
    case GgmlType::kF32:
      dequant::f32(s, dst, n);
      break;
    case GgmlType::kF16:
      dequant::f16(s, dst, n);
      break;
    case GgmlType::kBF16:
      dequant::bf16(s, dst, n);
      break;
    case GgmlType::kQ4_0:
      dequant::q4_0(s, dst, nb);
      break;
    case GgmlType::kQ4_1:
      dequant::q4_1(s, dst, nb);
      break;
    case GgmlType::kQ5_0:
      dequant::q5_0(s, dst, nb);
      break;
    case GgmlType::kQ5_1:
      dequant::q5_1(s, dst, nb);
      break;
    case GgmlType::kQ8_0:
      dequant::q8_0(s, dst, nb);
      break;
    case GgmlType::kQ4_K:
      dequant::q4_k(s, dst, nb);
      break;
    case GgmlType::kQ5_K:
      dequant::q5_k(s, dst, nb);
      break;
    case GgmlType::kQ6_K:
      dequant::q6_k(s, dst, nb);
      break;
    default:
      return make_error(ErrorCode::kInternal, "type ", traits->name,
                        " marked dequantizable but has no kernel");
  }
  return Status::ok();
}

}  // namespace agentkv
