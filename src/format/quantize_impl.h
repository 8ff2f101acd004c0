// Pieces shared by the block encoders behind quantize_values (quantize.h):
// directed f16 rounding of scales and the k-quant encoders. Internal to
// format/.
#pragma once

#include <cstdint>

#include "util/status.h"

namespace agentkv::quant {

// The f16 nearest to x on the side named: fp16_to_f32(result) >= x (up) or
// <= x (down). x is finite; the result is +-inf when x is past f16's range.
uint16_t fp16_round_up(float x);
uint16_t fp16_round_down(float x);

// Error unless the f16 scale `h` (named `what`, for block `block`) is finite.
Status check_scale(uint16_t h, const char* type, const char* what, int64_t block);

// q = round(t) clamped to [lo, hi]; t may be any float but NaN.
int round_clamp(float t, int lo, int hi);

// The k-quant encoders: n_blocks super-blocks of 256 finite values from v
// into out (n_blocks * 144, 176 or 210 bytes, zeroed by the caller).
Status encode_q4_k(const float* v, int64_t n_blocks, uint8_t* out);
Status encode_q5_k(const float* v, int64_t n_blocks, uint8_t* out);
Status encode_q6_k(const float* v, int64_t n_blocks, uint8_t* out);

}  // namespace agentkv::quant
