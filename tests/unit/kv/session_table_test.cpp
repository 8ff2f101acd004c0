// Agent sessions over the KV manager: protected blocks are evicted after
// every unprotected one, the share caps them (granted in order: sessions
// that hold protection keep it), and an expired or ended session's blocks
// become ordinary cached blocks.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "kv/kv_manager.h"

namespace agentkv {
namespace {

constexpr int32_t kBs = 4;

std::vector<int32_t> tokens(int32_t first, int32_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Runs a request over `t` (all full blocks computed and committed), then,
// with a session key, keeps its blocks, and frees it.
void run(KvManager& kv, RequestId id, const std::vector<int32_t>& t, const std::string& session = "",
         double expires = 100) {
  ASSERT_TRUE(kv.allocate_slots(id, static_cast<int32_t>(t.size())).is_ok());
  kv.commit_full_blocks(id, t, ExtraKeys{});
  if (!session.empty()) kv.keep_for_session(id, session, expires);
  kv.free(id);
}

// Request `id` adopts the cached prefix of `t` (its full blocks) and one
// token more: a later turn that reads an earlier one's blocks. Returns the
// blocks adopted.
int32_t read_prefix(KvManager& kv, RequestId id, const std::vector<int32_t>& t) {
  std::vector<int32_t> longer = t;
  longer.push_back(7);
  const KvBlocks hit = kv.get_computed_blocks(longer, ExtraKeys{});
  EXPECT_TRUE(kv.allocate_slots(id, 1, hit).is_ok());
  return hit.n_blocks();
}

int32_t cached_prefix_tokens(const KvManager& kv, const std::vector<int32_t>& t) {
  std::vector<int32_t> probe = t;
  probe.push_back(-1);  // lookups leave the last token to compute
  return kv.get_computed_blocks(probe, ExtraKeys{}).n_tokens();
}

TEST(SessionTable, ProtectedBlocksAreEvictedLast) {
  KvManager kv(8, kBs);
  const auto a = tokens(100, 8), b = tokens(200, 8);
  run(kv, 1, a, "s1");  // 2 blocks, protected
  run(kv, 2, b);        // 2 blocks, released after a's: ordinarily a would go first
  EXPECT_EQ(kv.pool().n_protected(), 2);
  // 6 new blocks: 4 free, then 2 evicted: b's, not a's.
  ASSERT_TRUE(kv.allocate_slots(3, 6 * kBs).is_ok());
  EXPECT_EQ(cached_prefix_tokens(kv, a), 8);
  EXPECT_EQ(cached_prefix_tokens(kv, b), 0);
  // Past every unprotected block, protected ones go too rather than fail.
  ASSERT_TRUE(kv.allocate_slots(4, 2 * kBs).is_ok());
  EXPECT_EQ(cached_prefix_tokens(kv, a), 0);
  EXPECT_EQ(kv.pool().n_protected(), 0);
  kv.free(3);
  kv.free(4);
  EXPECT_TRUE(kv.sessions().end("s1"));  // its refs are stale now: nothing to release, no crash
}

TEST(SessionTable, HitsOnProtectedBlocksAreCounted) {
  KvManager kv(8, kBs);
  const auto a = tokens(100, 8);
  run(kv, 1, a, "s1");
  ASSERT_EQ(read_prefix(kv, 2, a), 2);
  EXPECT_EQ(kv.pool().protected_hits(), 2);
  kv.free(2);
}

TEST(SessionTable, ExpiryAndEndMakeBlocksOrdinary) {
  KvManager kv(8, kBs);
  const auto a = tokens(100, 8), b = tokens(200, 8);
  run(kv, 1, a, "s1", /*expires=*/10);
  run(kv, 2, b, "s2", /*expires=*/50);
  kv.sessions().expire(5);
  EXPECT_EQ(kv.sessions().n_live(), 2);
  kv.sessions().expire(10);
  EXPECT_EQ(kv.sessions().n_live(), 1);
  EXPECT_EQ(kv.pool().n_protected(), 2);  // s2's
  EXPECT_FALSE(kv.sessions().end("nope"));
  EXPECT_TRUE(kv.sessions().end("s2"));
  EXPECT_EQ(kv.pool().n_protected(), 0);
  EXPECT_EQ(kv.pool().n_cached(), 4);  // still cached, only unprotected
  EXPECT_EQ(cached_prefix_tokens(kv, b), 8);
}

TEST(SessionTable, ShareIsGrantedInOrder) {
  KvManager kv(8, kBs);
  kv.sessions().set_share(0.5);  // 4 blocks
  const auto a = tokens(100, 8), b = tokens(200, 8), c = tokens(300, 8);
  run(kv, 1, a, "first");
  run(kv, 2, b, "second");
  EXPECT_EQ(kv.pool().n_protected(), 4);
  run(kv, 3, c, "third");  // the share is full: "third" gets none, the others keep theirs
  EXPECT_EQ(kv.pool().n_protected(), 4);
  ASSERT_TRUE(kv.allocate_slots(4, 2 * kBs).is_ok());  // 2 free blocks were left; takes them
  ASSERT_TRUE(kv.allocate_slots(5, 2 * kBs).is_ok());  // evicts the unprotected ones: third's
  EXPECT_EQ(cached_prefix_tokens(kv, a), 8);
  EXPECT_EQ(cached_prefix_tokens(kv, b), 8);
  EXPECT_EQ(cached_prefix_tokens(kv, c), 0);
  kv.free(4);
  kv.free(5);
  // An ended session makes room for the next one.
  EXPECT_TRUE(kv.sessions().end("first"));
  run(kv, 6, c, "third");
  EXPECT_EQ(kv.pool().n_protected(), 4);
  ASSERT_TRUE(kv.allocate_slots(7, 4 * kBs).is_ok());  // 2 free + first's 2, now ordinary
  EXPECT_EQ(cached_prefix_tokens(kv, a), 0);
  EXPECT_EQ(cached_prefix_tokens(kv, c), 8);
  // A session that outgrows the share keeps its head: a prefix hit needs
  // the chain from the first block.
  KvManager small(8, kBs);
  small.sessions().set_share(0.25);  // 2 blocks
  run(small, 1, tokens(100, 16), "big");
  EXPECT_EQ(small.pool().n_protected(), 2);
  ASSERT_TRUE(small.allocate_slots(2, 6 * kBs).is_ok());
  EXPECT_EQ(cached_prefix_tokens(small, tokens(100, 8)), 8);
}

TEST(SessionTable, ARecomputedBlockIsProtectedAgain) {
  KvManager kv(2, kBs);  // two blocks: every life below has ids 0 and 1
  kv.sessions().set_share(1.0);
  const auto a = tokens(100, 8);
  run(kv, 1, a, "s");
  ASSERT_TRUE(kv.allocate_slots(2, 2 * kBs).is_ok());  // evicts s's protected blocks: nothing else is left
  EXPECT_EQ(kv.pool().n_protected(), 0);
  kv.free(2);
  run(kv, 3, a, "s");  // the turn recomputes them, into the same ids as new lives
  EXPECT_EQ(kv.pool().n_protected(), 2);
  EXPECT_TRUE(kv.sessions().end("s"));
  EXPECT_EQ(kv.pool().n_protected(), 0);
}

TEST(SessionTable, BlocksSharedByTwoSessionsStayProtectedUntilBoth) {
  KvManager kv(8, kBs);
  const auto a = tokens(100, 8);
  run(kv, 1, a, "s1");
  ASSERT_EQ(read_prefix(kv, 2, a), 2);  // s2 reads s1's blocks
  kv.keep_for_session(2, "s2", 100);
  kv.free(2);
  EXPECT_EQ(kv.pool().n_protected(), 2);
  EXPECT_TRUE(kv.sessions().end("s1"));
  EXPECT_EQ(kv.pool().n_protected(), 2);
  EXPECT_TRUE(kv.sessions().end("s2"));
  EXPECT_EQ(kv.pool().n_protected(), 0);
}

}  // namespace
}  // namespace agentkv
