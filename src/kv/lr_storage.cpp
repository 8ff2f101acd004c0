#include "kv/lr_storage.h"

#include <limits>
#include <new>

namespace agentkv {

Result<LrStorage> LrStorage::create(const LrGeometry& g, int64_t n_blocks) {
  if (g.n_layers <= 0 || g.block_size <= 0 || g.width <= 0 || n_blocks <= 0) {
    return make_error(ErrorCode::kInvalidArgument, "LR cache geometry and block count must be positive");
  }
  if (n_blocks > std::numeric_limits<int64_t>::max() / g.block_floats() / 4) {
    return make_error(ErrorCode::kOutOfRange, "LR cache of ", n_blocks, " blocks is too large");
  }
  LrStorage s;
  s.g_ = g;
  s.n_blocks_ = n_blocks;
  if (!s.data_.allocate(static_cast<size_t>(n_blocks * g.block_floats()))) {
    return make_error(ErrorCode::kResourceExhausted, "cannot allocate ",
                      n_blocks * g.block_bytes() / (1 << 20),
                      " MiB for the LR cache; lower --kv-cache-mb or --lr-cache-rank");
  }
  return s;
}

}  // namespace agentkv
