// Random matrices in a GGUF block format for the quantized-product tests:
// random quants and sub-scales, well-scaled f16 block scales.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "format/ggml_type.h"

namespace agentkv::test {

// Where each type keeps its f16 scales (byte offsets in a block); every other
// byte of a block is a quant, a 6-bit sub-scale or an i8 sub-scale, for which
// any value is valid.
inline std::vector<int> f16_fields(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
      return {0, 2};
    case GgmlType::kQ6_K:
      return {208};
    default:
      return {0};
  }
}

// A random but well-scaled f16: sign random, magnitude in [2^-7, 2^-3).
inline uint16_t random_f16(std::mt19937& rng) {
  const uint16_t sign = (rng() & 1u) << 15;
  const uint16_t exp = 8 + rng() % 4;  // biased exponent: 2^(exp - 15)
  return static_cast<uint16_t>(sign | (exp << 10) | (rng() & 0x3ffu));
}

// n rows of k elements, each row_bytes long (>= the packed size; the rest is
// padding the kernel must skip).
inline std::vector<uint8_t> random_matrix(std::mt19937& rng, GgmlType t, int64_t n, int64_t k, int64_t row_bytes) {
  const auto tr = *ggml_type_traits(static_cast<uint32_t>(t));
  std::vector<uint8_t> data(n * row_bytes);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (int64_t j = 0; j < n; ++j)
    for (int64_t b = 0; b < k / tr.block_elems; ++b)
      for (int off : f16_fields(t)) {
        const uint16_t h = random_f16(rng);
        std::memcpy(&data[j * row_bytes + b * tr.block_bytes + off], &h, 2);
      }
  return data;
}

}  // namespace agentkv::test
