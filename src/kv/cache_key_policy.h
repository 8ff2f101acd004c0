// How one request's KV blocks are keyed in the prefix cache (docs/design.md §2):
// the engine sets it from the request's scheme, and the scheduler hands it
// to the KV manager at admission and after each step without reading it.
// What it says, in the KV manager's terms:
//   - blocks [0, base_blocks) carry base_keys, the later ones keys (aLoRA:
//     the base lineage before the invocation, shareable across agents);
//   - K/V past exact_tokens is approximate (copied by segment reuse): those
//     blocks are committed under keys marked approximate, which only segment
//     lookups find, and enter the segment index only from approx_index_from
//     on, so a copy never outlives the segment it came from;
//   - with a component pool (a KV component with blocks of its own, such as
//     LRAgent's LR cache), the request also holds blocks of that pool, keyed
//     by pool_keys, one per K/V block.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>

#include "kv/block_hash.h"
#include "kv/kv_manager.h"

namespace agentkv {

struct CacheKeyPolicy {
  ExtraKeys keys;
  ExtraKeys base_keys;
  int32_t base_blocks = 0;
  int32_t exact_tokens = std::numeric_limits<int32_t>::max();
  int32_t approx_index_from = 0;
  std::optional<ExtraKeys> pool_keys;  // set: the request also holds blocks of the component pool

  // The cached prefix of `tokens` in `kv`.
  KvBlocks lookup(const KvManager& kv, std::span<const int32_t> tokens) const {
    return kv.get_computed_blocks_split(tokens, base_keys, base_blocks, keys);
  }
  // Registers the request's full blocks of `computed` (every token whose K/V
  // is computed) in `kv` under the keys above.
  void commit(KvManager& kv, RequestId id, std::span<const int32_t> computed) const;
  bool has_pool() const { return pool_keys.has_value(); }
  // The same in the component pool (has_pool() only).
  KvBlocks lookup_pool(const KvManager& p, std::span<const int32_t> tokens) const {
    return p.get_computed_blocks(tokens, *pool_keys);
  }
  void commit_pool(KvManager& p, RequestId id, std::span<const int32_t> computed) const {
    p.commit_full_blocks(id, computed, *pool_keys);
  }
};

}  // namespace agentkv
