// Bookkeeping of KV blocks: which block ids are free. Pure ids and counts,
// never tensors (nano-vllm's block manager). Reference counts, the LRU of
// cached blocks and the prefix index come with the KV store.
#pragma once

#include <cstdint>
#include <vector>

#include "util/status.h"

namespace agentkv {

class BlockPool {
 public:
  explicit BlockPool(int32_t n_blocks);

  int32_t n_blocks() const { return static_cast<int32_t>(ref_.size()); }
  int32_t n_free() const { return static_cast<int32_t>(free_.size()); }

  // Takes n free blocks, or fails with kResourceExhausted leaving the pool unchanged.
  Result<std::vector<int32_t>> allocate(int32_t n);
  // Returns blocks taken with allocate.
  void release(const std::vector<int32_t>& blocks);

 private:
  std::vector<int32_t> free_;  // stack of free ids, lowest id on top
  std::vector<uint8_t> ref_;   // 1 while allocated
};

}  // namespace agentkv
