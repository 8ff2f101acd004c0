// Encoding f32 values into ggml block formats: the inverse of dequantize_row,
// for the types agentkv writes (synthetic models, tests).
#pragma once

#include <cstdint>
#include <vector>

#include "format/fp16.h"  // f32_to_fp16
#include "format/ggml_type.h"
#include "util/status.h"

namespace agentkv {

// Encodes n values (a multiple of the type's block size) as f32, f16 or q8_0.
Result<std::vector<uint8_t>> quantize_values(GgmlType type, const float* values, int64_t n);

}  // namespace agentkv
