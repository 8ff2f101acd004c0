// ggml tensor element types as stored in GGUF files, their block layout, and
// dequantization to f32. Knows nothing of models.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "util/status.h"

namespace agentkv {

// Values are the on-disk ids (ggml.h `enum ggml_type`).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
};

struct GgmlTypeTraits {
  std::string_view name;   // "q4_1"
  int64_t block_elems;     // elements per block (1 for plain types)
  int64_t block_bytes;     // bytes per block
  bool can_dequantize;     // dequantize_row supports it
};

// Traits of a known type id, or nullopt for an id this build does not know.
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type_id);

// Name of a type id for messages: "q4_1", or "type 77" for unknown ids.
std::string ggml_type_name(uint32_t type_id);

// Bytes taken by a row of n elements; error if n is not a multiple of the
// block size or the byte count overflows.
Result<uint64_t> ggml_row_bytes(GgmlType type, int64_t n);

// Dequantizes n elements (a multiple of the type's block size) from src into
// dst. Error for a type it cannot dequantize.
Status dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

}  // namespace agentkv
