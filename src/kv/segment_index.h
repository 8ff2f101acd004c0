// Segment index: position-independent keys over cached full blocks, so a
// cached run of tokens can be found wherever it occurs in a new prompt
// (SparseX "virtual blocks", docs/scheme_algorithms.md §2.1 step 1; docs/design.md §2). The key
// is H(kRootHash, token ids, extra keys): unlike the prefix hash it is not
// chained, so it does not depend on what preceded the block.
//
// An entry is bookkeeping only, no KV memory: the source block in the life it
// was registered in, and the sequence position its first token was computed
// at. Token ids and extra-key bytes are not stored twice: an indexed block's
// prefix-index key holds them, and a hit is verified against it
// (segment_match.h), so a hash collision is a miss.
//
// One entry per physical block and one block per hash, so memory is bounded
// by n_blocks. When several blocks hold the same tokens and keys (at
// different positions), or two contents collide on a hash, the most recently
// registered block owns the hash and the other one loses its entry.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "kv/prefix_index.h"

namespace agentkv {

struct SegmentEntry {
  BlockRef block;     // the source block, in the life it was registered in
  int32_t pos = 0;    // sequence position of its first token (block i of a sequence: i * block_size)
  uint64_t hash = 0;  // H(kRootHash, tokens, extra)
};

class SegmentIndex {
 public:
  explicit SegmentIndex(int32_t n_blocks) : entries_(n_blocks), next_(n_blocks) {}

  // Registers `block` under `hash` at position `pos`, replacing the entry the
  // block had and the entry of the block that owned the hash. Records the
  // block as the successor of `prev` (the block before it in its sequence;
  // id -1 for none) so that a run of hits can be extended into it.
  void add(BlockRef block, uint64_t hash, int32_t pos, BlockRef prev);
  // Forgets the block's entry and successor: call when the block leaves the
  // prefix index or is handed out again (its content is gone).
  void erase(int32_t block);

  // The entry that owns `hash`, whatever its content; nullptr if none. The
  // caller verifies that the block is current and holds the asked content.
  const SegmentEntry* find(uint64_t hash) const;
  // The block most recently registered right after `block` in a sequence;
  // {-1, 0} if none. May be stale: the caller verifies it.
  BlockRef next_of(int32_t block) const { return next_[block]; }

  // Whether the block has an entry of its own.
  bool has(int32_t block) const { return entries_[block].has_value(); }
  // Entries (at most n_blocks).
  int32_t size() const { return static_cast<int32_t>(by_hash_.size()); }

 private:
  std::vector<std::optional<SegmentEntry>> entries_;  // per block id
  std::vector<BlockRef> next_;                        // per block id
  std::unordered_map<uint64_t, int32_t> by_hash_;     // hash -> block id
};

}  // namespace agentkv
