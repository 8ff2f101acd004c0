// Bookkeeping of KV blocks: ids, reference counts, the LRU of cached blocks
// and the prefix index over them. Never tensors (nano-vllm's block manager,
// vLLM v1's block_pool).
//
// Every block is in exactly one state:
//   used   ref > 0                      (some sequence holds it)
//   cached ref == 0, in the prefix index (findable; on the LRU, evictable)
//   free   ref == 0, not indexed        (never-used or forgotten content)
// allocate() takes free blocks first and only then evicts the least recently
// released cached block, so cached KV lives as long as memory allows.
// A cached block that an agent session protects (protect(); session_table.h)
// sits on a second LRU, evicted only when the first is empty.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/block_observer.h"
#include "kv/prefix_index.h"
#include "util/status.h"

namespace agentkv {

// Per-block state. Components a scheme attaches to a block later (an LR cache
// for LRAgent, a hidden-state snapshot, per-token statistics) go here as
// handles, so they live and die with the block.
struct BlockMeta {
  int32_t ref = 0;
  uint32_t generation = 0;  // bumped at each allocate: stale BlockRefs stop matching
  int32_t lru_prev = -1;    // intrusive LRU links (only while cached)
  int32_t lru_next = -1;
  bool in_lru = false;
  int8_t lru_list = 0;      // 0: ordinary, 1: protected (while in_lru)
  int32_t protect = 0;      // sessions protecting this life of the block
};

class BlockPool {
 public:
  explicit BlockPool(int32_t n_blocks);

  int32_t n_blocks() const { return static_cast<int32_t>(meta_.size()); }
  int32_t n_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t n_cached() const { return n_cached_; }
  int32_t n_used() const { return n_blocks() - n_free() - n_cached(); }
  // Blocks allocate() can hand out: free ones plus evictable cached ones.
  int32_t n_available() const { return n_free() + n_cached(); }

  // Takes n blocks with ref 1, free ones first, then evicting cached blocks
  // LRU-first (their index entries go). Fails with kResourceExhausted and
  // changes nothing when fewer than n are available.
  Result<std::vector<int32_t>> allocate(int32_t n);
  // Drops one reference per listed block. A block reaching 0 goes to the LRU
  // tail if it is indexed (stays findable), else back to the free list.
  void release(const std::vector<int32_t>& blocks);
  // A prefix hit: one more reference; a cached block leaves the LRU (O(1)).
  void touch(int32_t block);
  // A segment hit (its K/V copied, no reference taken): an unreferenced
  // cached block moves to the LRU tail, last to be evicted (O(1)).
  void refresh(int32_t block);

  // Session protection, counted per block: while > 0 a cached block is
  // evicted only after every unprotected one. Evicting it anyway (the
  // protected LRU's head, when nothing else is left) drops its count.
  void protect(int32_t block);
  void unprotect(int32_t block);
  int32_t n_protected() const { return n_protected_; }  // blocks with a count > 0
  // Prefix and segment hits on protected blocks (cumulative).
  int64_t protected_hits() const { return protected_hits_; }

  // Prefix index over the pool. cache() registers a held (ref > 0) block;
  // false if its hash is taken (see PrefixIndex::insert). parent_hash is what
  // key.hash was chained from; only the observer sees it.
  bool cache(int32_t block, BlockKey key, uint64_t parent_hash = 0);
  int32_t find_cached(const BlockKey& key) const { return index_.find(key); }
  // Forgets a block's content: out of the index, and off the LRU onto the
  // free list if unreferenced.
  void uncache(int32_t block);
  const PrefixIndex& index() const { return index_; }
  // Told of every registration and every removal from the index (null: none).
  // Not owned; it outlives the pool or is reset first.
  void set_observer(BlockObserver* o) { observer_ = o; }

  const BlockMeta& meta(int32_t block) const { return meta_[block]; }
  BlockRef ref_of(int32_t block) const { return {block, meta_[block].generation}; }
  // True while `r` still names the same life of its block.
  bool is_current(BlockRef r) const {
    return r.id >= 0 && r.id < n_blocks() && meta_[r.id].generation == r.generation;
  }
  // Cached blocks from the next to be evicted to the last; for tests and stats. O(n).
  std::vector<int32_t> lru_order() const;

 private:
  void lru_push_back(int32_t b);
  void lru_remove(int32_t b);
  // Takes the block out of the index, telling the observer.
  void unindex(int32_t b);

  std::vector<BlockMeta> meta_;
  std::vector<int32_t> free_;  // stack of free ids, lowest id on top
  // Per list (0 ordinary, 1 protected): next to evict, most recently released.
  int32_t lru_head_[2] = {-1, -1};
  int32_t lru_tail_[2] = {-1, -1};
  int32_t n_cached_ = 0;
  int32_t n_protected_ = 0;
  int64_t protected_hits_ = 0;
  PrefixIndex index_;
  BlockObserver* observer_ = nullptr;
};

}  // namespace agentkv
