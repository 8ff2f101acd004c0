#include "model/weights.h"

#include <cstring>

#include "format/ggml_type.h"

namespace agentkv {

int64_t DenseTensor::numel() const {
  if (shape.empty()) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool DenseTensor::row_f32(int64_t r, float* out) const {
  if (shape.size() != 2 || r < 0 || r >= shape[0]) return false;
  const int64_t cols = shape[1];
  if (!data.empty()) {
    std::memcpy(out, data.data() + r * cols, sizeof(float) * cols);
    return true;
  }
  if (packed.empty() || k8) return false;
  return dequantize_row(static_cast<GgmlType>(packed_type), packed.data() + r * packed_row_bytes, out, cols).is_ok();
}

std::vector<float> DenseTensor::values_f32() const {
  if (!data.empty() || packed.empty()) return data;
  std::vector<float> out(static_cast<size_t>(numel()));
  for (int64_t r = 0; r < shape[0]; ++r) {
    if (!row_f32(r, out.data() + r * shape[1])) return {};
  }
  return out;
}

}  // namespace agentkv
