// CacheKeyPolicy (kv/cache_key_policy.h): what a request's blocks are keyed
// under, as exact prefix lookups by other requests see them.
#include "kv/cache_key_policy.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace agentkv {
namespace {

constexpr int32_t kBs = 4;

TEST(CacheKeyPolicy, BaseBlocksExactAndApproximateKeys) {
  KvManager kv(32, kBs);
  std::vector<int32_t> t(17);  // 4 full blocks and one token
  std::iota(t.begin(), t.end(), 100);
  CacheKeyPolicy p;
  p.base_keys.tenant = "acme";
  p.keys = p.base_keys;
  p.keys.lineage = "adapter";
  p.base_blocks = 1;    // block 0 shareable under the base lineage
  p.exact_tokens = 12;  // K/V of tokens 12.. was copied: block 3 approximate
  p.approx_index_from = 12;
  ASSERT_TRUE(kv.allocate_slots(1, 17).is_ok());
  p.commit(kv, 1, t);

  // The base lineage finds block 0 only; the adapter's, blocks 1-2 after it.
  EXPECT_EQ(kv.get_computed_blocks(t, p.base_keys).n_blocks(), 1);
  EXPECT_EQ(p.lookup(kv, t).n_blocks(), 3);
  // Block 3 is committed approximate: no exact lookup finds it.
  CacheKeyPolicy all_adapter = p;
  all_adapter.base_blocks = 0;
  EXPECT_EQ(all_adapter.lookup(kv, t).n_blocks(), 0);  // block 0 is not under the adapter's keys
  ExtraKeys approx = p.keys;
  approx.approximate = true;
  EXPECT_EQ(kv.get_computed_blocks(t, approx).n_blocks(), 0);  // an approximate block never heads a prefix
  // Another tenant sees nothing.
  CacheKeyPolicy other = p;
  other.base_keys.tenant = other.keys.tenant = "other";
  EXPECT_EQ(other.lookup(kv, t).n_blocks(), 0);
}

TEST(CacheKeyPolicy, EverythingExactWithoutALimit) {
  KvManager kv(32, kBs);
  std::vector<int32_t> t(9);
  std::iota(t.begin(), t.end(), 7);
  CacheKeyPolicy p;  // no base blocks, no approximate K/V
  ASSERT_TRUE(kv.allocate_slots(1, 9).is_ok());
  p.commit(kv, 1, t);
  EXPECT_EQ(p.lookup(kv, t).n_blocks(), 2);
  KvManager pool(32, kBs);
  p.pool_keys = ExtraKeys{};
  p.pool_keys->lineage = "lr";
  ASSERT_TRUE(pool.allocate_slots(1, 9).is_ok());
  p.commit_pool(pool, 1, t);
  EXPECT_EQ(p.lookup_pool(pool, t).n_blocks(), 2);
  EXPECT_EQ(pool.get_computed_blocks(t, ExtraKeys{}).n_blocks(), 0);  // only under the pool's keys
}

}  // namespace
}  // namespace agentkv
