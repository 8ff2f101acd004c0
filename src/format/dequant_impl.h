// Per-type row dequantizers behind dequantize_row (ggml_type.h). Each takes
// n_blocks whole blocks of its type and writes n_blocks * block_elems floats.
// Internal to format/.
#pragma once

#include <cstdint>

namespace agentkv::dequant {

void f32(const uint8_t* src, float* dst, int64_t n);
void f16(const uint8_t* src, float* dst, int64_t n);
void bf16(const uint8_t* src, float* dst, int64_t n);
void q4_0(const uint8_t* src, float* dst, int64_t n_blocks);
void q4_1(const uint8_t* src, float* dst, int64_t n_blocks);
void q5_0(const uint8_t* src, float* dst, int64_t n_blocks);
void q5_1(const uint8_t* src, float* dst, int64_t n_blocks);
void q8_0(const uint8_t* src, float* dst, int64_t n_blocks);
void q4_k(const uint8_t* src, float* dst, int64_t n_blocks);
void q5_k(const uint8_t* src, float* dst, int64_t n_blocks);
void q6_k(const uint8_t* src, float* dst, int64_t n_blocks);

}  // namespace agentkv::dequant
