// Prefix index: block hash -> the one block that holds that KV. A hit is
// served only if the stored key equals the asked key in full (parent, token
// ids, extra keys), so a hash collision is a miss, never wrong KV
// (nano-vllm's check). Pure bookkeeping: no tensors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace agentkv {

// A block at one point of its life: the generation changes each time the
// pool hands the block out again, so a stale reference never matches.
struct BlockRef {
  int32_t id = -1;
  uint32_t generation = 0;
  bool operator==(const BlockRef&) const = default;
};

// Everything that identifies the KV of a full block. The parent is the
// parent's block *reference*, not only its hash: if the chain is verified
// block by block from the root, a hit certifies the whole prefix, even when
// two different parents shared a hash.
//
// A block imported alone from a remote tier, whose parent this process does
// not hold, has parent kOrphanParent: no prefix lookup reaches it (lookups
// chain parents from the root), only the segment index finds it, and a
// computed block of the same hash replaces it.
inline constexpr BlockRef kOrphanParent{-2, 0};

struct BlockKey {
  uint64_t hash = 0;
  BlockRef parent;              // {-1, 0} for the first block; kOrphanParent: not held
  std::vector<int32_t> tokens;  // block_size token ids
  std::string extra;            // ExtraKeys::serialize()

  bool operator==(const BlockKey&) const = default;
};

class PrefixIndex {
 public:
  explicit PrefixIndex(int32_t n_blocks) : keys_(n_blocks) {}

  // The block whose key equals `key`; -1 on a miss or a hash collision.
  int32_t find(const BlockKey& key) const;
  // Registers `block` under key.hash. False (and no change) when the hash is
  // already taken, by the same content or by a collision, or the block is
  // already indexed.
  bool insert(int32_t block, BlockKey key);
  // Forgets the block's entry (no-op if it has none).
  void erase(int32_t block);

  bool contains(int32_t block) const { return keys_[block].has_value(); }
  const BlockKey* key_of(int32_t block) const { return keys_[block] ? &*keys_[block] : nullptr; }
  // The block registered under `hash`, whatever its key; -1 if none.
  int32_t holder(uint64_t hash) const {
    auto it = by_hash_.find(hash);
    return it == by_hash_.end() ? -1 : it->second;
  }
  int32_t size() const { return static_cast<int32_t>(by_hash_.size()); }

 private:
  std::unordered_map<uint64_t, int32_t> by_hash_;
  std::vector<std::optional<BlockKey>> keys_;  // per block id
};

}  // namespace agentkv
