#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace agentkv {
namespace {

BlockKey key_for(int32_t tag) {
  BlockKey k;
  k.hash = 1000 + static_cast<uint64_t>(tag);
  k.tokens = {tag, tag, tag, tag};
  return k;
}

void expect_partition(const BlockPool& p) {
  EXPECT_EQ(p.n_free() + p.n_cached() + p.n_used(), p.n_blocks());
  EXPECT_EQ(static_cast<int32_t>(p.lru_order().size()), p.n_cached());
}

TEST(BlockPool, AllocatesDistinctBlocksAndReleasesThem) {
  BlockPool p(4);
  auto a = p.allocate(3);
  ASSERT_TRUE(a.is_ok());
  std::vector<int32_t> ids = *a;
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::unique(ids.begin(), ids.end()), ids.end());
  EXPECT_EQ(p.n_used(), 3);
  EXPECT_EQ(p.n_free(), 1);
  for (int32_t b : *a) EXPECT_EQ(p.meta(b).ref, 1);
  p.release(*a);  // never hashed: back to the free list
  EXPECT_EQ(p.n_free(), 4);
  EXPECT_EQ(p.n_cached(), 0);
  expect_partition(p);
}

TEST(BlockPool, ExhaustedIsAnErrorThatChangesNothing) {
  BlockPool p(3);
  auto a = p.allocate(2);
  ASSERT_TRUE(a.is_ok());
  ASSERT_TRUE(p.cache((*a)[0], key_for(1)));
  p.release({(*a)[0]});  // one cached, one used, one free
  auto b = p.allocate(3);
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(b.status().message(), "KV cache exhausted: need 3 blocks, 2 free of 3");
  EXPECT_EQ(p.n_used(), 1);
  EXPECT_EQ(p.n_cached(), 1);
  EXPECT_EQ(p.n_free(), 1);
  EXPECT_EQ(p.find_cached(key_for(1)), (*a)[0]);  // the cached block was not evicted
}

TEST(BlockPool, RefcountsCountEveryHolder) {
  BlockPool p(2);
  auto a = p.allocate(1);
  ASSERT_TRUE(a.is_ok());
  const int32_t b = (*a)[0];
  ASSERT_TRUE(p.cache(b, key_for(7)));
  p.touch(b);
  EXPECT_EQ(p.meta(b).ref, 2);
  p.release({b});
  EXPECT_EQ(p.meta(b).ref, 1);
  EXPECT_EQ(p.n_used(), 1);
  p.release({b});
  EXPECT_EQ(p.meta(b).ref, 0);
  EXPECT_EQ(p.n_cached(), 1);
  expect_partition(p);
}

TEST(BlockPool, CachedBlocksStayFindableUntilEvictedLruFirst) {
  BlockPool p(4);
  auto a = p.allocate(4);
  ASSERT_TRUE(a.is_ok());
  const std::vector<int32_t> ids = *a;
  for (int32_t i = 0; i < 3; ++i) ASSERT_TRUE(p.cache(ids[i], key_for(i)));
  // Release order = LRU order: ids[2] first (least recent), then 0, then 1.
  p.release({ids[2]});
  p.release({ids[0]});
  p.release({ids[1]});
  p.release({ids[3]});  // not hashed: free
  EXPECT_EQ(p.lru_order(), (std::vector<int32_t>{ids[2], ids[0], ids[1]}));
  EXPECT_EQ(p.n_free(), 1);
  EXPECT_EQ(p.n_cached(), 3);
  for (int32_t i = 0; i < 3; ++i) EXPECT_EQ(p.find_cached(key_for(i)), ids[i]);

  // The free block goes first; cached content survives.
  auto b = p.allocate(1);
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ((*b)[0], ids[3]);
  EXPECT_EQ(p.n_cached(), 3);
  // Then the least recently released cached block is evicted and forgotten.
  const uint32_t gen = p.meta(ids[2]).generation;
  auto c = p.allocate(1);
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ((*c)[0], ids[2]);
  EXPECT_EQ(p.find_cached(key_for(2)), -1);
  EXPECT_FALSE(p.index().contains(ids[2]));
  EXPECT_NE(p.meta(ids[2]).generation, gen);
  EXPECT_EQ(p.find_cached(key_for(0)), ids[0]);
  EXPECT_EQ(p.lru_order(), (std::vector<int32_t>{ids[0], ids[1]}));
  expect_partition(p);
}

TEST(BlockPool, TouchRemovesFromTheMiddleOfTheLru) {
  BlockPool p(5);
  auto a = p.allocate(5);
  ASSERT_TRUE(a.is_ok());
  const std::vector<int32_t> ids = *a;
  for (int32_t i = 0; i < 5; ++i) ASSERT_TRUE(p.cache(ids[i], key_for(i)));
  for (int32_t b : ids) p.release({b});
  EXPECT_EQ(p.lru_order(), ids);
  p.touch(ids[2]);  // middle
  p.touch(ids[0]);  // head
  p.touch(ids[4]);  // tail
  EXPECT_EQ(p.lru_order(), (std::vector<int32_t>{ids[1], ids[3]}));
  EXPECT_EQ(p.n_cached(), 2);
  EXPECT_EQ(p.n_used(), 3);
  // Pinned blocks are never evicted: only the two cached ones can be taken.
  EXPECT_FALSE(p.allocate(3).is_ok());
  auto b = p.allocate(2);
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(*b, (std::vector<int32_t>{ids[1], ids[3]}));
  // A touched block released again goes to the tail (most recent).
  p.release({ids[0]});
  p.release({ids[2]});
  EXPECT_EQ(p.lru_order(), (std::vector<int32_t>{ids[0], ids[2]}));
  expect_partition(p);
}

TEST(BlockPool, RefreshMovesACachedBlockToTheLruTailOnly) {
  BlockPool p(4);
  auto a = p.allocate(3);
  ASSERT_TRUE(a.is_ok());
  const std::vector<int32_t> ids = *a;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(p.cache(ids[i], key_for(i)));
  p.release(ids);  // LRU: ids[0], ids[1], ids[2]
  p.refresh(ids[0]);
  EXPECT_EQ(p.lru_order(), (std::vector<int32_t>{ids[1], ids[2], ids[0]}));
  EXPECT_EQ(p.meta(ids[0]).ref, 0);  // no reference taken
  p.touch(ids[1]);                   // held: refresh is a no-op
  p.refresh(ids[1]);
  EXPECT_EQ(p.lru_order(), (std::vector<int32_t>{ids[2], ids[0]}));
  auto f = p.allocate(2);            // the free block, then the LRU head
  ASSERT_TRUE(f.is_ok());
  EXPECT_NE(std::find(f->begin(), f->end(), ids[2]), f->end());
  EXPECT_EQ(p.lru_order(), (std::vector<int32_t>{ids[0]}));
  expect_partition(p);
}

TEST(BlockPool, UncacheForgetsContent) {
  BlockPool p(2);
  auto a = p.allocate(2);
  ASSERT_TRUE(a.is_ok());
  ASSERT_TRUE(p.cache((*a)[0], key_for(0)));
  ASSERT_TRUE(p.cache((*a)[1], key_for(1)));
  EXPECT_FALSE(p.cache((*a)[1], key_for(2)));  // already indexed
  p.release(*a);
  p.uncache((*a)[0]);
  EXPECT_EQ(p.find_cached(key_for(0)), -1);
  EXPECT_EQ(p.n_free(), 1);
  EXPECT_EQ(p.n_cached(), 1);
  expect_partition(p);
}


// Records what the pool tells its observer.
struct Recorder final : BlockObserver {
  std::vector<std::pair<int32_t, uint64_t>> stored;   // block, key hash
  std::vector<uint64_t> parents;
  std::vector<std::pair<int32_t, uint64_t>> removed;  // block, key hash
  void block_stored(int32_t block, const BlockKey& key, uint64_t parent_hash) override {
    stored.emplace_back(block, key.hash);
    parents.push_back(parent_hash);
  }
  void block_removed(int32_t block, const BlockKey& key) override { removed.emplace_back(block, key.hash); }
};

TEST(BlockPool, ObserverSeesEveryRegistrationAndRemoval) {
  BlockPool p(2);
  Recorder rec;
  p.set_observer(&rec);
  auto a = p.allocate(2);
  ASSERT_TRUE(a.is_ok());
  const std::vector<int32_t> blocks = a.value();
  EXPECT_TRUE(p.cache(blocks[0], key_for(1), 77));
  EXPECT_FALSE(p.cache(blocks[1], key_for(1), 77));  // the hash is taken: nothing registered, nothing said
  ASSERT_EQ(rec.stored.size(), 1u);
  EXPECT_EQ(rec.stored[0], std::make_pair(blocks[0], uint64_t{1001}));
  EXPECT_EQ(rec.parents[0], 77u);
  EXPECT_TRUE(p.cache(blocks[1], key_for(2)));
  p.release(blocks);
  // An eviction is a removal, told before the entry goes.
  auto b = p.allocate(1);
  ASSERT_TRUE(b.is_ok());
  ASSERT_EQ(rec.removed.size(), 1u);
  EXPECT_EQ(rec.removed[0], std::make_pair(blocks[0], uint64_t{1001}));
  // uncache of an indexed block is one; of an unindexed one, none.
  p.uncache(blocks[1]);
  p.uncache(blocks[1]);
  ASSERT_EQ(rec.removed.size(), 2u);
  EXPECT_EQ(rec.removed[1], std::make_pair(blocks[1], uint64_t{1002}));
  p.set_observer(nullptr);
  EXPECT_TRUE(p.cache(b.value()[0], key_for(3)));
  EXPECT_EQ(rec.stored.size(), 2u);
}

}  // namespace
}  // namespace agentkv
