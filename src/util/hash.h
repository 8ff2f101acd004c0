// 64-bit content hashing (xxHash3), for adapter identity and block hashes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace agentkv {

uint64_t hash_bytes(const void* data, size_t n, uint64_t seed = 0);
inline uint64_t hash_bytes(std::span<const uint8_t> b, uint64_t seed = 0) {
  return hash_bytes(b.data(), b.size(), seed);
}

}  // namespace agentkv
