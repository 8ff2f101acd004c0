#include "kv/prefix_index.h"

#include <utility>

namespace agentkv {

int32_t PrefixIndex::find(const BlockKey& key) const {
  auto it = by_hash_.find(key.hash);
  if (it == by_hash_.end()) return -1;
  const BlockKey& stored = *keys_[it->second];
  return stored == key ? it->second : -1;
}

bool PrefixIndex::insert(int32_t block, BlockKey key) {
  if (keys_[block] || by_hash_.count(key.hash)) return false;
  by_hash_.emplace(key.hash, block);
  keys_[block] = std::move(key);
  return true;
}

void PrefixIndex::erase(int32_t block) {
  if (!keys_[block]) return;
  by_hash_.erase(keys_[block]->hash);
  keys_[block].reset();
}

}  // namespace agentkv
