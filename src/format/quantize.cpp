#include "format/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace agentkv {

Result<std::vector<uint8_t>> quantize_values(GgmlType type, const float* v, int64_t n) {
  std::vector<uint8_t> out;
  if (type == GgmlType::kF32) {
    out.resize(n * 4);
    std::memcpy(out.data(), v, out.size());
  } else if (type == GgmlType::kF16) {
    out.resize(n * 2);
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = f32_to_fp16(v[i]);
      std::memcpy(&out[2 * i], &h, 2);
    }
  } else if (type == GgmlType::kQ8_0) {  // blocks of 32: f16 scale d, 32 x int8 q; x = d * q
    if (n % 32) return make_error(ErrorCode::kInvalidArgument, "q8_0 needs a multiple of 32 values, got ", n);
    out.resize(n / 32 * 34);
    for (int64_t b = 0; b < n / 32; ++b) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[b * 32 + j]));
      const float d = amax / 127.0f;
      const float id = d > 0 ? 1.0f / d : 0.0f;
      const uint16_t dh = f32_to_fp16(d);
      std::memcpy(&out[b * 34], &dh, 2);
      for (int j = 0; j < 32; ++j) {
        out[b * 34 + 2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::lround(v[b * 32 + j] * id)));
      }
    }
  } else {
    return make_error(ErrorCode::kUnsupported, "cannot encode ", ggml_type_name(static_cast<uint32_t>(type)),
                      " (f32, f16 and q8_0 only)");
  }
  return out;
}

}  // namespace agentkv
