#include "kv/lr_storage.h"

#include <cstring>
#include <limits>
#include <new>

#include "format/fp16.h"

namespace agentkv {

Result<LrStorage> LrStorage::create(const LrGeometry& g, int64_t n_blocks) {
  if (g.n_layers <= 0 || g.block_size <= 0 || g.width <= 0 || n_blocks <= 0) {
    return make_error(ErrorCode::kInvalidArgument, "LR cache geometry and block count must be positive");
  }
  if (n_blocks > std::numeric_limits<int64_t>::max() / g.block_bytes()) {
    return make_error(ErrorCode::kOutOfRange, "LR cache of ", n_blocks, " blocks is too large");
  }
  LrStorage s;
  s.g_ = g;
  s.n_blocks_ = n_blocks;
  if (!s.data_.allocate(static_cast<size_t>(n_blocks * g.block_bytes()))) {
    return make_error(ErrorCode::kResourceExhausted, "cannot allocate ",
                      n_blocks * g.block_bytes() / (1 << 20),
                      " MiB for the LR cache; lower --kv-cache-mb or --lr-cache-rank");
  }
  return s;
}

void LrStorage::write_row(int32_t layer, int64_t slot, const float* v) {
  uint8_t* dst = row(layer, slot);
  if (g_.dtype == KvDType::kF32) {
    std::memcpy(dst, v, sizeof(float) * g_.width);
    return;
  }
  for (int32_t e = 0; e < g_.width; ++e) {
    const uint16_t h = g_.dtype == KvDType::kF16 ? f32_to_fp16(v[e]) : f32_to_bf16(v[e]);
    std::memcpy(dst + 2 * e, &h, 2);
  }
}

}  // namespace agentkv
