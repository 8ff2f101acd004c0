#include "kv/segment_index.h"

namespace agentkv {

void SegmentIndex::add(BlockRef block, uint64_t hash, int32_t pos, BlockRef prev) {
  if (entries_[block.id]) {
    auto it = by_hash_.find(entries_[block.id]->hash);
    if (it != by_hash_.end() && it->second == block.id) by_hash_.erase(it);
    entries_[block.id].reset();
  }
  auto [it, inserted] = by_hash_.try_emplace(hash, block.id);
  if (!inserted) {  // the most recent registration wins the hash
    entries_[it->second].reset();
    it->second = block.id;
  }
  entries_[block.id] = SegmentEntry{block, pos, hash};
  if (prev.id >= 0) next_[prev.id] = block;
}

void SegmentIndex::erase(int32_t block) {
  next_[block] = BlockRef{};
  if (!entries_[block]) return;
  auto it = by_hash_.find(entries_[block]->hash);
  if (it != by_hash_.end() && it->second == block) by_hash_.erase(it);
  entries_[block].reset();
}

const SegmentEntry* SegmentIndex::find(uint64_t hash) const {
  auto it = by_hash_.find(hash);
  return it == by_hash_.end() ? nullptr : &*entries_[it->second];
}

}  // namespace agentkv
