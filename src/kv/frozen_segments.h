// The frozen segment pool (SparseX §4, "knowledge base"; docs/design.md §2
// FrozenPool): segments an operator pinned so that their KV stays cached
// whatever the LRU would do. Bookkeeping only, like BlockPool: which blocks
// each segment pins, how often it was hit and when, and which segments were
// evicted. KvManager takes and drops the block references this names.
//
// A segment is its token ids, the namespace keys it was computed under, and
// the blocks that hold its full blocks' KV (block i holds tokens
// [i*bs, (i+1)*bs), computed at those positions). One block may belong to
// several segments (segments sharing a prefix share the blocks: SparseX's
// virtual blocks); each segment holds its own reference on it.
//
// Eviction order (above the watermark): the least-hit segment first, the one
// least recently used among equals. An evicted segment drops its references
// (its blocks go back to the LRU, still findable until reused) and stays in
// the listing, marked evicted, until deleted; at most kMaxEvictedKept such
// records are kept, oldest dropped first.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"
#include "kv/prefix_index.h"

namespace agentkv {

struct FrozenSegment {
  std::string id;
  std::vector<int32_t> tokens;
  ExtraKeys keys;                // namespace (tenant, cache_salt) and lineage it was computed under
  std::vector<BlockRef> blocks;  // pinned full blocks in position order; empty once evicted
  int32_t n_blocks = 0;          // blocks it pinned when frozen (kept after eviction, for the listing)
  int64_t hits = 0;              // KV blocks served from it to later requests (prefix or segment hits)
  uint64_t last_use = 0;         // logical clock of its last hit (or its creation): eviction order
  int64_t created_ms = 0;        // unix time, milliseconds
  int64_t last_used_ms = 0;      // unix time of its last hit (or its creation), milliseconds
  bool evicted = false;
};

class FrozenSegments {
 public:
  static constexpr size_t kMaxEvictedKept = 256;

  // Adds a frozen segment. False (and no change) if the id is taken.
  bool add(FrozenSegment seg);
  // Removes a segment, frozen or evicted; its pinned blocks are returned for
  // the caller to release. nullopt for an unknown id.
  std::optional<std::vector<BlockRef>> remove(const std::string& id);
  // Marks a frozen segment evicted and returns the blocks it pinned (to
  // release). Empty for an unknown or already evicted id.
  std::vector<BlockRef> evict(const std::string& id);
  // The frozen segment to evict next; nullptr when none is frozen.
  const FrozenSegment* victim() const;

  // A later request was served `block`'s KV: every frozen segment pinning it
  // counts a hit, used at `now_ms` (unix).
  void record_hit(int32_t block, int64_t now_ms);
  bool pins(int32_t block) const { return by_block_.count(block) != 0; }

  const FrozenSegment* find(const std::string& id) const;
  // Every segment, frozen and evicted, in id order.
  std::vector<const FrozenSegment*> list() const;

  int32_t n_frozen() const { return n_frozen_; }
  // Distinct blocks pinned by at least one frozen segment.
  int32_t n_pinned_blocks() const { return static_cast<int32_t>(by_block_.size()); }
  int64_t n_evictions() const { return n_evictions_; }

 private:
  void unpin(const FrozenSegment& s);

  std::map<std::string, FrozenSegment> segs_;
  std::unordered_map<int32_t, std::vector<std::string>> by_block_;  // block -> frozen segments pinning it
  std::vector<std::string> evicted_order_;                          // evicted ids, oldest first
  uint64_t clock_ = 0;
  int32_t n_frozen_ = 0;
  int64_t n_evictions_ = 0;
};

}  // namespace agentkv
