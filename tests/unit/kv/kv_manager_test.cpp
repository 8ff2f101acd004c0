#include "kv/kv_manager.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace agentkv {
namespace {

constexpr int32_t kBs = 4;

std::vector<int32_t> iota_tokens(int32_t n, int32_t first = 100) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Prefills `tokens` for request `id` the way a scheduler would, with the
// runner's computation elided: lookup, allocate, commit.
int32_t prefill(KvManager& kv, RequestId id, const std::vector<int32_t>& tokens, const ExtraKeys& keys = {}) {
  KvBlocks hit = kv.get_computed_blocks(tokens, keys);
  Status st = kv.allocate_slots(id, static_cast<int32_t>(tokens.size()) - hit.n_tokens(), hit);
  EXPECT_TRUE(st.is_ok()) << st.message();
  kv.commit_full_blocks(id, tokens, keys);
  return hit.n_tokens();
}

TEST(KvManager, SharedPrefixHitsFullBlocksOnly) {
  KvManager kv(16, kBs);
  std::vector<int32_t> a = iota_tokens(10);  // 2 full blocks + 2 tokens
  EXPECT_EQ(prefill(kv, 1, a), 0);
  EXPECT_EQ(kv.block_table(1).size(), 3u);
  EXPECT_EQ(kv.num_slots(1), 10);

  // Same first 9 tokens, then different: the two full blocks are shared, the
  // partial third block is not.
  std::vector<int32_t> b = a;
  b[9] = 7;
  b.push_back(8);
  KvBlocks hit = kv.get_computed_blocks(b, {});
  EXPECT_EQ(hit.n_blocks(), 2);
  EXPECT_EQ(hit.n_tokens(), 8);
  ASSERT_TRUE(kv.allocate_slots(2, 3, hit).is_ok());
  const auto& t1 = kv.block_table(1);
  const auto& t2 = kv.block_table(2);
  ASSERT_EQ(t2.size(), 3u);
  EXPECT_EQ(t2[0], t1[0]);
  EXPECT_EQ(t2[1], t1[1]);
  EXPECT_NE(t2[2], t1[2]);
  EXPECT_EQ(kv.pool().meta(t1[0]).ref, 2);
  EXPECT_EQ(kv.usage().n_used, 4);

  // A first block that differs shares nothing, even if later blocks match.
  std::vector<int32_t> c = a;
  c[0] = 1;
  EXPECT_EQ(kv.get_computed_blocks(c, {}).n_blocks(), 0);
}

TEST(KvManager, NeverMatchesTheWholePrompt) {
  KvManager kv(16, kBs);
  std::vector<int32_t> a = iota_tokens(8);
  prefill(kv, 1, a);
  // An identical 8-token prompt: only the first block may hit, so the last
  // token is computed and has logits.
  EXPECT_EQ(kv.get_computed_blocks(a, {}).n_tokens(), 4);
  std::vector<int32_t> longer = iota_tokens(9);
  EXPECT_EQ(kv.get_computed_blocks(longer, {}).n_tokens(), 8);
  EXPECT_EQ(kv.get_computed_blocks(std::vector<int32_t>{}, {}).n_tokens(), 0);
}

TEST(KvManager, GeneratedBlocksAreRegisteredAsTheyFill) {
  KvManager kv(16, kBs);
  std::vector<int32_t> seq = iota_tokens(3);
  prefill(kv, 1, seq);
  for (int32_t t = 0; t < 6; ++t) {  // decode six tokens
    ASSERT_TRUE(kv.allocate_slots(1, 1).is_ok());
    seq.push_back(500 + t);
    kv.commit_full_blocks(1, seq, {});
  }
  EXPECT_EQ(kv.num_slots(1), 9);
  EXPECT_EQ(kv.block_table(1).size(), 3u);
  seq.push_back(1);
  EXPECT_EQ(kv.get_computed_blocks(seq, {}).n_tokens(), 8);
}

TEST(KvManager, HitAfterFreeMissAfterEviction) {
  KvManager kv(4, kBs);
  std::vector<int32_t> a = iota_tokens(12);
  prefill(kv, 1, a);
  kv.free(1);
  EXPECT_EQ(kv.usage().n_cached, 3);
  EXPECT_EQ(kv.usage().n_used, 0);
  EXPECT_FALSE(kv.has_request(1));
  std::vector<int32_t> probe = iota_tokens(13);
  EXPECT_EQ(kv.get_computed_blocks(probe, {}).n_tokens(), 12);

  // Blocks were released tail first, so pressure evicts the tail first and
  // the head of the prefix survives longest.
  ASSERT_TRUE(kv.allocate_slots(2, 2 * kBs).is_ok());  // 1 free + 1 evicted
  EXPECT_EQ(kv.get_computed_blocks(probe, {}).n_tokens(), 8);
  ASSERT_TRUE(kv.allocate_slots(3, kBs).is_ok());
  EXPECT_EQ(kv.get_computed_blocks(probe, {}).n_tokens(), 4);
  ASSERT_TRUE(kv.allocate_slots(4, kBs).is_ok());
  EXPECT_EQ(kv.get_computed_blocks(probe, {}).n_tokens(), 0);
  EXPECT_EQ(kv.usage().n_used, 4);
}

TEST(KvManager, CachedHitIsPinnedAgainstEviction) {
  KvManager kv(3, kBs);
  prefill(kv, 1, iota_tokens(8));
  kv.free(1);  // 2 cached, 1 free
  std::vector<int32_t> p = iota_tokens(9);
  KvBlocks hit = kv.get_computed_blocks(p, {});
  ASSERT_EQ(hit.n_blocks(), 2);
  // Needs 1 new block + pins 2 cached ones: fits exactly.
  ASSERT_TRUE(kv.allocate_slots(2, 1, hit).is_ok());
  EXPECT_EQ(kv.usage().n_used, 3);
  EXPECT_EQ(kv.usage().n_cached, 0);
  EXPECT_EQ(kv.num_slots(2), 9);
}

TEST(KvManager, ExhaustedLeavesEverythingUnchanged) {
  KvManager kv(3, kBs);
  prefill(kv, 1, iota_tokens(8));
  kv.free(1);
  std::vector<int32_t> p = iota_tokens(13);
  KvBlocks hit = kv.get_computed_blocks(p, {});
  ASSERT_EQ(hit.n_blocks(), 2);
  // 2 more blocks + 2 pinned > 3 available.
  Status st = kv.allocate_slots(2, 5, hit);
  EXPECT_EQ(st.code(), ErrorCode::kResourceExhausted);
  EXPECT_FALSE(kv.has_request(2));
  EXPECT_EQ(kv.usage().n_cached, 2);
  EXPECT_EQ(kv.usage().n_free, 1);
  EXPECT_EQ(kv.get_computed_blocks(p, {}).n_blocks(), 2);
  // A running request that cannot grow keeps its blocks.
  ASSERT_TRUE(kv.allocate_slots(3, 4).is_ok());
  EXPECT_EQ(kv.allocate_slots(3, 12).code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(kv.num_slots(3), 4);
  EXPECT_EQ(kv.block_table(3).size(), 1u);
}

TEST(KvManager, StaleHandleIsRejected) {
  KvManager kv(2, kBs);
  prefill(kv, 1, iota_tokens(8));
  kv.free(1);
  KvBlocks hit = kv.get_computed_blocks(iota_tokens(5), {});
  ASSERT_EQ(hit.n_blocks(), 1);
  ASSERT_TRUE(kv.allocate_slots(2, 8).is_ok());  // evicts both cached blocks
  Status st = kv.allocate_slots(3, 1, hit);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_FALSE(kv.has_request(3));
  // A prefix is adopted only by a request's first allocation.
  EXPECT_EQ(kv.allocate_slots(2, 1, hit).code(), ErrorCode::kInvalidArgument);
}

uint64_t constant_hash(uint64_t, std::span<const int32_t>, std::string_view) { return 7; }

TEST(KvManager, HashCollisionIsNeverServed) {
  KvManager kv(16, kBs, constant_hash);  // every block collides
  std::vector<int32_t> a = iota_tokens(9);
  prefill(kv, 1, a);
  std::vector<int32_t> b = iota_tokens(9, 300);
  EXPECT_EQ(kv.get_computed_blocks(b, {}).n_blocks(), 0);
  // The one block that owns the hash still hits for its own content.
  EXPECT_EQ(kv.get_computed_blocks(a, {}).n_blocks(), 1);
  // And a request whose content collides can still run.
  EXPECT_EQ(prefill(kv, 2, b), 0);
}

uint64_t parentless_hash(uint64_t, std::span<const int32_t> tokens, std::string_view extra) {
  return hash_block(kRootHash, tokens, extra);
}

TEST(KvManager, ParentIsVerifiedNotOnlyTheBlockTokens) {
  // With a hash blind to the parent, block T after X and block T after Y
  // share a hash; the index must still tell them apart.
  KvManager kv(16, kBs, parentless_hash);
  const std::vector<int32_t> x = {1, 1, 1, 1}, y = {2, 2, 2, 2}, t = {3, 3, 3, 3};
  std::vector<int32_t> xt = x;
  xt.insert(xt.end(), t.begin(), t.end());
  xt.push_back(9);
  std::vector<int32_t> yt = y;
  yt.insert(yt.end(), t.begin(), t.end());
  yt.push_back(9);
  prefill(kv, 1, xt);
  std::vector<int32_t> y_only = y;
  y_only.push_back(9);
  prefill(kv, 2, y_only);
  EXPECT_EQ(kv.get_computed_blocks(xt, {}).n_blocks(), 2);
  EXPECT_EQ(kv.get_computed_blocks(yt, {}).n_blocks(), 1);  // Y hits, T-after-X must not
}

TEST(KvManager, NamespacesNeverShare) {
  KvManager kv(16, kBs);
  std::vector<int32_t> p = iota_tokens(9);
  ExtraKeys alice{.lineage = "", .tenant = "alice", .cache_salt = ""};
  ExtraKeys bob{.lineage = "", .tenant = "bob", .cache_salt = ""};
  ExtraKeys alice_salted{.lineage = "", .tenant = "alice", .cache_salt = "s1"};
  prefill(kv, 1, p, alice);
  EXPECT_EQ(kv.get_computed_blocks(p, alice).n_blocks(), 2);
  EXPECT_EQ(kv.get_computed_blocks(p, bob).n_blocks(), 0);
  EXPECT_EQ(kv.get_computed_blocks(p, alice_salted).n_blocks(), 0);
  EXPECT_EQ(kv.get_computed_blocks(p, ExtraKeys{}).n_blocks(), 0);
  EXPECT_EQ(prefill(kv, 2, p, bob), 0);
  EXPECT_EQ(prefill(kv, 3, p, bob), 8);
}

TEST(KvManager, LineagesNeverShareButPerBlockKeysCanMix) {
  KvManager kv(16, kBs);
  std::vector<int32_t> p = iota_tokens(13);
  ExtraKeys base{};
  ExtraKeys lora{.lineage = "adapter-hash-1", .tenant = "", .cache_salt = ""};
  // aLoRA-style: blocks 0-1 written by the base, block 2 by the adapter.
  ASSERT_TRUE(kv.allocate_slots(1, 13).is_ok());
  kv.commit_full_blocks(1, std::span<const int32_t>(p).first(8), base);
  kv.commit_full_blocks(1, p, lora);
  EXPECT_EQ(kv.get_computed_blocks(p, base).n_blocks(), 2);  // block 2 is not base KV
  EXPECT_EQ(kv.get_computed_blocks(p, lora).n_blocks(), 0);  // block 0 is not adapter KV
  const std::vector<ExtraKeys> mixed = {base, base, lora};
  EXPECT_EQ(kv.get_computed_blocks_per_block(p, mixed).n_blocks(), 3);
  const std::vector<ExtraKeys> other = {base, base, ExtraKeys{"adapter-hash-2", "", ""}};
  EXPECT_EQ(kv.get_computed_blocks_per_block(p, other).n_blocks(), 2);
}

TEST(KvManager, ApproximateBlocksServeSegmentReuseOnly) {
  // A segment-reuse request's blocks after its first reused token are
  // committed as approximate: never an exact prefix hit, but found by
  // find_segments, after exact blocks of the same tokens.
  KvManager kv(32, kBs);
  const std::vector<int32_t> p = iota_tokens(12);
  ExtraKeys exact{};
  ExtraKeys approx{};
  approx.approximate = true;
  ASSERT_TRUE(kv.allocate_slots(1, 12).is_ok());
  kv.commit_full_blocks(1, std::span<const int32_t>(p).first(4), exact);
  kv.commit_full_blocks(1, p, approx);
  EXPECT_EQ(kv.get_computed_blocks(p, exact).n_blocks(), 1);  // blocks 1-2 are approximate
  EXPECT_NE(exact.serialize(), approx.serialize());

  // A new prompt holding tokens 104..111 behind other tokens: found, through
  // the approximate entries only.
  std::vector<int32_t> q = iota_tokens(5, 900);
  q.insert(q.end(), p.begin() + 4, p.end());
  q.push_back(7);
  std::vector<SegmentHit> hits = kv.find_segments(q, 0, exact, 0);
  int32_t covered = 0;
  for (const SegmentHit& h : hits) covered += h.n;
  EXPECT_EQ(covered, 8);
  for (const SegmentHit& h : hits) EXPECT_EQ(h.src.id, kv.block_table(1)[1 + (h.src_pos - 4) / kBs]);

  // Once request 2 computes the same tokens exactly, its blocks win.
  ASSERT_TRUE(kv.allocate_slots(2, 12).is_ok());
  kv.commit_full_blocks(2, p, exact);
  hits = kv.find_segments(q, 0, exact, 0);
  covered = 0;
  for (const SegmentHit& h : hits) {
    covered += h.n;
    EXPECT_TRUE(h.src.id == kv.block_table(2)[1] || h.src.id == kv.block_table(2)[2]) << h.src.id;
  }
  EXPECT_EQ(covered, 8);
}

TEST(KvManager, BlocksBeforeSegmentFromStayOutOfTheSegmentIndex) {
  // Blocks holding copied K/V are committed (the chain goes on) but are not
  // found by segment lookup; the blocks after them are.
  KvManager kv(32, kBs);
  const std::vector<int32_t> p = iota_tokens(12);
  ExtraKeys approx{};
  approx.approximate = true;
  ASSERT_TRUE(kv.allocate_slots(1, 12).is_ok());
  kv.commit_full_blocks(1, p, approx, /*segment_from=*/2);
  std::vector<int32_t> q = iota_tokens(5, 900);
  q.insert(q.end(), p.begin(), p.end());
  q.push_back(7);
  int32_t covered = 0;
  for (const SegmentHit& h : kv.find_segments(q, 0, ExtraKeys{}, 0)) {
    covered += h.n;
    EXPECT_GE(h.src_pos, 8) << "block " << h.src_pos / kBs << " holds copies";
  }
  EXPECT_EQ(covered, 4);
}

TEST(KvManager, DuplicateContentIsIndexedOnce) {
  KvManager kv(16, kBs);
  std::vector<int32_t> p = iota_tokens(9);
  // Two requests prefill the same prompt concurrently (neither hits).
  ASSERT_TRUE(kv.allocate_slots(1, 9).is_ok());
  ASSERT_TRUE(kv.allocate_slots(2, 9).is_ok());
  kv.commit_full_blocks(1, p, {});
  kv.commit_full_blocks(2, p, {});
  EXPECT_EQ(kv.pool().index().size(), 2);
  kv.free(2);  // its duplicates carry no index entry: straight to free
  EXPECT_EQ(kv.usage().n_cached, 0);
  EXPECT_EQ(kv.usage().n_free, 13);
  // A third request extends the chain past request 1's blocks.
  std::vector<int32_t> q = iota_tokens(13);
  EXPECT_EQ(prefill(kv, 3, q), 8);
  q.push_back(0);
  EXPECT_EQ(kv.get_computed_blocks(q, {}).n_blocks(), 3);
}

TEST(KvManager, HeldDuplicateReplacesAnUnreferencedOne) {
  KvManager kv(16, kBs);
  std::vector<int32_t> p = iota_tokens(9);
  ASSERT_TRUE(kv.allocate_slots(2, 9).is_ok());  // started before request 1 committed
  prefill(kv, 1, p);
  kv.free(1);
  EXPECT_EQ(kv.usage().n_cached, 2);
  kv.commit_full_blocks(2, p, {});
  // Request 2's held blocks now carry the content; the idle copies are free.
  EXPECT_EQ(kv.usage().n_cached, 0);
  KvBlocks hit = kv.get_computed_blocks(p, {});
  ASSERT_EQ(hit.n_blocks(), 2);
  ASSERT_TRUE(kv.allocate_slots(3, 1, hit).is_ok());
  EXPECT_EQ(kv.block_table(3)[0], kv.block_table(2)[0]);
  EXPECT_EQ(kv.block_table(3)[1], kv.block_table(2)[1]);
}

}  // namespace
}  // namespace agentkv
