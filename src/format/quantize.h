// Encoding f32 values into ggml block formats: the inverse of dequantize_row,
// for the types agentkv writes (synthetic models, tests).
#pragma once

#include <cstdint>
#include <vector>

#include "format/fp16.h"  // f32_to_fp16
#include "format/ggml_type.h"
#include "util/status.h"

namespace agentkv {

// Encodes n values as f32, f16, q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K or
// q6_K, in ggml's block layouts (what dequantize_row reads back). Simple
// deterministic scales, no error search: every value comes back within half a
// step of its (sub-)block's grid, plus the f16 rounding of the scales, except
// on q4_0, q5_0 and q6_K, whose scale maps the block's largest magnitude to the
// most negative code (as ggml's reference), so values of the other sign can
// lose up to one step. Errors: kUnsupported for other types; kInvalidArgument
// when n is not a multiple of the block size (32, or 256 for the K types), when
// a block type is given NaN or +-inf (f32 and f16 store them as they are), or
// when a block's scale would overflow f16.
Result<std::vector<uint8_t>> quantize_values(GgmlType type, const float* values, int64_t n);

}  // namespace agentkv
