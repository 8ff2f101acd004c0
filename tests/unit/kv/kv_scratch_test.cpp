// KvScratch (kv/kv_scratch.h): rows kept in blocks lent by the KV pool.
// They take blocks from the pool (so they count against the KV budget),
// evict cached blocks like any allocation, refuse what the pool cannot
// lend, read back what was put, and go back to the pool at release.
#include "kv/kv_scratch.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace agentkv {
namespace {

TEST(KvScratch, RowsLiveInBlocksLentByThePool) {
  // A block: 2 layers x K,V x 4 tokens x 4 floats = 256 bytes: 5 rows of 12 floats.
  const KvGeometry g{/*n_layers=*/2, /*kv_heads=*/1, /*head_dim=*/4, /*block_size=*/4, KvDType::kF32};
  auto storage = KvStorage::create(g, 6);
  ASSERT_TRUE(storage.is_ok());
  KvManager kv(6, 4);
  KvScratch scratch(&kv, &*storage, /*width=*/12);
  EXPECT_EQ(scratch.rows_per_block(), 5);

  // A request's cached block, then free: evictable.
  ASSERT_TRUE(kv.allocate_slots(1, 4).is_ok());
  const std::vector<int32_t> toks{1, 2, 3, 4};
  kv.commit_full_blocks(1, toks, {});
  kv.free(1);
  const std::vector<int32_t> longer{1, 2, 3, 4, 5};  // a hit leaves the last token to compute
  ASSERT_EQ(kv.get_computed_blocks(longer, {}).n_blocks(), 1);

  EXPECT_FALSE(scratch.reserve(7, 0));
  EXPECT_FALSE(scratch.reserve(7, 31));  // 7 blocks: more than the pool
  EXPECT_FALSE(scratch.holds(7));
  ASSERT_TRUE(scratch.reserve(7, 30));    // all 6 blocks: the cached one is evicted
  EXPECT_TRUE(scratch.holds(7));
  EXPECT_FALSE(scratch.reserve(7, 1));    // once until released
  EXPECT_EQ(kv.pool().n_available(), 0);
  EXPECT_EQ(kv.get_computed_blocks(longer, {}).n_blocks(), 0);
  EXPECT_FALSE(scratch.reserve(8, 1));    // nothing left to lend
  EXPECT_FALSE(kv.allocate_slots(2, 1).is_ok());

  std::vector<float> row(12), back(12);
  for (int64_t i = 0; i < 30; ++i) {
    std::iota(row.begin(), row.end(), static_cast<float>(100 * i));
    scratch.put(7, i, row.data());
  }
  for (int64_t i = 0; i < 30; ++i) {
    scratch.get(7, i, back.data());
    EXPECT_EQ(back[0], static_cast<float>(100 * i)) << i;
    EXPECT_EQ(back[11], static_cast<float>(100 * i + 11)) << i;
  }
  scratch.release(7);
  EXPECT_FALSE(scratch.holds(7));
  EXPECT_EQ(kv.pool().n_available(), 6);
  scratch.release(7);  // nothing held: nothing happens
  EXPECT_TRUE(kv.allocate_slots(2, 24).is_ok());
}

}  // namespace
}  // namespace agentkv
