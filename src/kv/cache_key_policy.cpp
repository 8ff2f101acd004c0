#include "kv/cache_key_policy.h"

#include <algorithm>

namespace agentkv {

void CacheKeyPolicy::commit(KvManager& kv, RequestId id, std::span<const int32_t> computed) const {
  const int32_t n_computed = static_cast<int32_t>(computed.size());
  const int32_t n_exact = std::min(n_computed, exact_tokens);
  if (base_blocks > 0) {
    // Base-lineage blocks first; the second call picks up from the next block.
    const int32_t n_base = std::min(n_exact, base_blocks * kv.block_size());
    kv.commit_full_blocks(id, computed.first(static_cast<size_t>(n_base)), base_keys);
  }
  kv.commit_full_blocks(id, computed.first(static_cast<size_t>(n_exact)), keys);
  if (n_computed > exact_tokens) {
    ExtraKeys approx = keys;
    approx.approximate = true;
    const int32_t bs = kv.block_size();
    kv.commit_full_blocks(id, computed, approx, (approx_index_from + bs - 1) / bs);
  }
}

}  // namespace agentkv
