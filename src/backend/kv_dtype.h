// The element type of the paged KV cache (--kv-dtype). Values are computed
// in f32 and rounded to this type when written; attention reads it directly
// and widens to f32 in registers.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace agentkv {

enum class KvDType : uint8_t { kF32, kF16, kBF16 };

inline int32_t kv_dtype_bytes(KvDType t) { return t == KvDType::kF32 ? 4 : 2; }

inline const char* kv_dtype_name(KvDType t) {
  switch (t) {
    case KvDType::kF32:
      return "f32";
    case KvDType::kF16:
      return "f16";
    case KvDType::kBF16:
      return "bf16";
  }
  return "?";
}

// dst[0..n) = the n elements of type t at src (host memory), widened to f32
// exactly. For the KV store's reads of single rows (hooks, captures); the
// backend implements it (cpu/kv_convert.cpp), so the store needs no
// backend's kernels.
void kv_row_to_f32(KvDType t, const void* src, float* dst, int64_t n);

inline std::optional<KvDType> kv_dtype_parse(std::string_view s) {
  if (s == "f32") return KvDType::kF32;
  if (s == "f16") return KvDType::kF16;
  if (s == "bf16") return KvDType::kBF16;
  return std::nullopt;
}

}  // namespace agentkv
