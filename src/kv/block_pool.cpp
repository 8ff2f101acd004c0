#include "kv/block_pool.h"

#include <cassert>

namespace agentkv {

BlockPool::BlockPool(int32_t n_blocks) : ref_(n_blocks, 0) {
  free_.reserve(n_blocks);
  for (int32_t i = n_blocks - 1; i >= 0; --i) free_.push_back(i);
}

Result<std::vector<int32_t>> BlockPool::allocate(int32_t n) {
  if (n < 0 || n > n_free()) {
    return make_error(ErrorCode::kResourceExhausted, "KV cache exhausted: need ", n, " blocks, ", n_free(),
                      " free of ", n_blocks());
  }
  std::vector<int32_t> out(free_.end() - n, free_.end());
  free_.resize(free_.size() - n);
  for (int32_t b : out) ref_[b] = 1;
  return out;
}

void BlockPool::release(const std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) {
    assert(b >= 0 && b < n_blocks() && ref_[b] == 1);
    ref_[b] = 0;
    free_.push_back(b);
  }
}

}  // namespace agentkv
