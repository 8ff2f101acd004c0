// What a listener outside the KV manager learns of the prefix index: a block
// registered under a key, and a registered block forgotten (evicted, or its
// content dropped). KV cache events for routers (runtime/kv_event_source.h)
// are built from these. Called on the thread that owns the KvManager, inside
// its calls: an observer only records, it never calls back into the pool.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/prefix_index.h"

namespace agentkv {

class BlockObserver {
 public:
  virtual ~BlockObserver() = default;
  // `block` now holds `key`'s content and is findable. parent_hash is the
  // hash the key's hash was chained from (kRootHash for a first block).
  virtual void block_stored(int32_t block, const BlockKey& key, uint64_t parent_hash) = 0;
  // `block`, registered under `key` until now, is no longer findable.
  virtual void block_removed(int32_t block, const BlockKey& key) = 0;
};

// Several observers on one pool, told in order.
class BlockObservers final : public BlockObserver {
 public:
  void add(BlockObserver* o) { list_.push_back(o); }
  bool empty() const { return list_.empty(); }
  void block_stored(int32_t block, const BlockKey& key, uint64_t parent_hash) override {
    for (BlockObserver* o : list_) o->block_stored(block, key, parent_hash);
  }
  void block_removed(int32_t block, const BlockKey& key) override {
    for (BlockObserver* o : list_) o->block_removed(block, key);
  }

 private:
  std::vector<BlockObserver*> list_;
};

}  // namespace agentkv
