// The frozen segment pool: pinned blocks never go back to the LRU while
// frozen, hits are counted, nothing is pinned when freezing fails, and above
// the watermark the least-hit segment is evicted first.
#include "kv/frozen_segments.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "kv/kv_manager.h"

namespace agentkv {
namespace {

constexpr int32_t kBs = 4;

std::vector<int32_t> range(int32_t n, int32_t first) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Lookup, allocate, commit, free: a finished prefill with the runner elided.
void prefill_and_free(KvManager& kv, RequestId id, const std::vector<int32_t>& tokens,
                      const ExtraKeys& keys = {}) {
  KvBlocks hit = kv.get_computed_blocks(tokens, keys);
  Status st = kv.allocate_slots(id, static_cast<int32_t>(tokens.size()) - hit.n_tokens(), hit);
  ASSERT_TRUE(st.is_ok()) << st.message();
  kv.commit_full_blocks(id, tokens, keys);
  kv.free(id);
}

// Computes and freezes `tokens` as the engine does: prefill from position 0,
// then pin.
int32_t make_segment(KvManager& kv, RequestId id, const std::string& name, const std::vector<int32_t>& tokens,
                     const ExtraKeys& keys = {}) {
  KvBlocks hit = kv.get_computed_blocks(tokens, keys);
  EXPECT_TRUE(kv.allocate_slots(id, static_cast<int32_t>(tokens.size()) - hit.n_tokens(), hit).is_ok());
  kv.commit_full_blocks(id, tokens, keys);
  Result<int32_t> n = kv.freeze_segment(name, tokens, keys);
  kv.free(id);
  EXPECT_TRUE(n.is_ok()) << n.status().message();
  return n.is_ok() ? *n : -1;
}

TEST(FrozenSegments, PinnedBlocksStayOffTheLru) {
  KvManager kv(8, kBs);
  kv.set_frozen_watermark(1.0);                     // evicted only when the pool cannot serve otherwise
  const std::vector<int32_t> seg = range(10, 100);  // 2 full blocks + 2 tokens
  EXPECT_EQ(make_segment(kv, 1, "s", seg), 2);
  EXPECT_EQ(kv.frozen().n_frozen(), 1);
  EXPECT_EQ(kv.frozen().n_pinned_blocks(), 2);
  EXPECT_EQ(kv.usage().n_used, 2);  // the partial third block went back
  for (int32_t b : kv.pool().lru_order()) EXPECT_FALSE(kv.frozen().pins(b));

  // Filling the rest of the pool (the LRU included) does not take the
  // frozen blocks.
  ASSERT_TRUE(kv.allocate_slots(2, 6 * kBs).is_ok());
  EXPECT_EQ(kv.frozen().n_evictions(), 0);
  kv.free(2);
  // Still found as a prefix after the pressure.
  EXPECT_EQ(kv.get_computed_blocks(cat({seg, {1}}), {}).n_blocks(), 2);
  // Past the whole pool, the segment gives way rather than the request failing.
  ASSERT_TRUE(kv.allocate_slots(3, 8 * kBs).is_ok());
  EXPECT_EQ(kv.frozen().n_evictions(), 1);
  EXPECT_TRUE(kv.frozen().find("s")->evicted);
}

TEST(FrozenSegments, FailedFreezePinsNothing) {
  KvManager kv(8, kBs);
  const std::vector<int32_t> seg = range(8, 100);
  // Never computed.
  Result<int32_t> r = kv.freeze_segment("s", seg, {});
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
  // Half computed: the first block is cached, the second is not.
  prefill_and_free(kv, 1, range(5, 100));
  const KvUsage before = kv.usage();
  r = kv.freeze_segment("s", seg, {});
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(kv.usage().n_used, before.n_used);
  EXPECT_EQ(kv.usage().n_cached, before.n_cached);
  EXPECT_EQ(kv.frozen().n_frozen(), 0);
  EXPECT_EQ(kv.frozen().n_pinned_blocks(), 0);
  // Under another namespace the same tokens are not cached.
  prefill_and_free(kv, 2, seg);
  ExtraKeys other;
  other.tenant = "b";
  EXPECT_EQ(kv.freeze_segment("s", seg, other).status().code(), ErrorCode::kNotFound);
  // Shorter than a block; a taken id.
  EXPECT_EQ(kv.freeze_segment("t", range(3, 100), {}).status().code(), ErrorCode::kInvalidArgument);
  ASSERT_TRUE(kv.freeze_segment("s", seg, {}).is_ok());
  EXPECT_EQ(kv.freeze_segment("s", seg, {}).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(kv.frozen().n_pinned_blocks(), 2);
}

TEST(FrozenSegments, DeleteForgetsTheKv) {
  KvManager kv(8, kBs);
  const std::vector<int32_t> seg = range(8, 100);
  make_segment(kv, 1, "s", seg);
  EXPECT_EQ(kv.usage().n_used, 2);
  ASSERT_TRUE(kv.unfreeze_segment("s").is_ok());
  EXPECT_EQ(kv.usage().n_used, 0);
  EXPECT_EQ(kv.usage().n_cached, 0);  // later prompts recompute it
  EXPECT_EQ(kv.get_computed_blocks(cat({seg, {1}}), {}).n_blocks(), 0);
  EXPECT_TRUE(kv.find_segments(cat({range(3, 900), seg, {1}}), 0, {}, kBs).empty());
  EXPECT_EQ(kv.frozen().n_frozen(), 0);
  EXPECT_EQ(kv.frozen().list().size(), 0u);
  EXPECT_EQ(kv.unfreeze_segment("s").code(), ErrorCode::kNotFound);
}

TEST(FrozenSegments, SharedPrefixSegmentsShareBlocks) {
  KvManager kv(8, kBs);
  const std::vector<int32_t> a = range(8, 100);
  const std::vector<int32_t> ab = cat({a, range(4, 500)});
  make_segment(kv, 1, "a", a);
  make_segment(kv, 2, "ab", ab);
  EXPECT_EQ(kv.frozen().n_pinned_blocks(), 3);  // a's two blocks are ab's first two
  const auto& blocks = kv.frozen().find("a")->blocks;
  EXPECT_EQ(kv.pool().meta(blocks[0].id).ref, 2);
  ASSERT_TRUE(kv.unfreeze_segment("ab").is_ok());
  EXPECT_EQ(kv.pool().meta(blocks[0].id).ref, 1);
  EXPECT_EQ(kv.frozen().n_pinned_blocks(), 2);
  EXPECT_EQ(kv.usage().n_used, 2);
  // a's blocks are still its own: still found, at any offset too.
  EXPECT_EQ(kv.get_computed_blocks(cat({a, {1}}), {}).n_blocks(), 2);
  EXPECT_EQ(kv.find_segments(cat({range(3, 900), a, {1}}), 0, {}, kBs).size(), 2u);
}

TEST(FrozenSegments, HitsFromAnyOffsetAreCounted) {
  KvManager kv(32, kBs);
  const std::vector<int32_t> seg = range(12, 100);
  make_segment(kv, 1, "s", seg);
  EXPECT_EQ(kv.frozen().find("s")->hits, 0);
  // The segment at offset 5 of a new prompt: found through the segment index.
  const std::vector<int32_t> prompt = cat({range(5, 900), seg, range(3, 950)});
  const std::vector<SegmentHit> hits = kv.find_segments(prompt, 0, {}, kBs);
  int32_t covered = 0;
  for (const SegmentHit& h : hits) {
    EXPECT_TRUE(kv.frozen().pins(h.src.id));
    covered += h.n;
    kv.segment_hit_used(h);
  }
  EXPECT_EQ(covered, 12);
  EXPECT_EQ(kv.frozen().find("s")->hits, 3);
  // Not under another tenant.
  ExtraKeys other;
  other.tenant = "b";
  EXPECT_TRUE(kv.find_segments(prompt, 0, other, kBs).empty());
  // A prefix hit counts as well.
  KvBlocks hit = kv.get_computed_blocks(cat({seg, {7}}), {});
  ASSERT_EQ(hit.n_blocks(), 3);
  ASSERT_TRUE(kv.allocate_slots(2, 1, hit).is_ok());
  EXPECT_EQ(kv.frozen().find("s")->hits, 6);
}

TEST(FrozenSegments, FrozenBlockKeepsItsSegmentEntry) {
  KvManager kv(32, kBs);
  const std::vector<int32_t> seg = range(8, 100);
  make_segment(kv, 1, "s", seg);
  // The same tokens committed later at another position do not take the
  // segment-index entries of the frozen blocks.
  prefill_and_free(kv, 2, cat({range(4, 900), seg}));
  const std::vector<SegmentHit> hits = kv.find_segments(cat({range(6, 700), seg, {1}}), 0, {}, kBs);
  ASSERT_FALSE(hits.empty());
  for (const SegmentHit& h : hits) EXPECT_TRUE(kv.frozen().pins(h.src.id)) << h.src.id;
}

TEST(FrozenSegments, WatermarkEvictsTheLeastHitFirst) {
  KvManager kv(10, kBs);                       // watermark 0.9: 9 blocks
  make_segment(kv, 1, "cold", range(8, 100));  // 2 blocks
  make_segment(kv, 2, "hot", range(8, 200));   // 2 blocks
  make_segment(kv, 3, "warm", range(8, 300));  // 2 blocks
  // hot is hit twice, warm once.
  KvBlocks h = kv.get_computed_blocks(cat({range(8, 200), {1}}), {});
  ASSERT_TRUE(kv.allocate_slots(4, 1, h).is_ok());
  kv.free(4);
  h = kv.get_computed_blocks(cat({range(4, 300), {1}}), {});
  ASSERT_TRUE(kv.allocate_slots(5, 1, h).is_ok());
  kv.free(5);
  EXPECT_EQ(kv.usage().n_used, 6);
  // 3 more blocks: 9 used, at the watermark, nothing evicted.
  ASSERT_TRUE(kv.allocate_slots(6, 3 * kBs).is_ok());
  EXPECT_EQ(kv.frozen().n_evictions(), 0);
  // One more goes above it: the cold segment goes first, only it.
  ASSERT_TRUE(kv.allocate_slots(7, 1).is_ok());
  EXPECT_EQ(kv.frozen().n_evictions(), 1);
  EXPECT_TRUE(kv.frozen().find("cold")->evicted);
  EXPECT_TRUE(kv.frozen().find("cold")->blocks.empty());
  EXPECT_EQ(kv.frozen().find("cold")->n_blocks, 2);
  EXPECT_FALSE(kv.frozen().find("hot")->evicted);
  EXPECT_FALSE(kv.frozen().find("warm")->evicted);
  EXPECT_EQ(kv.frozen().n_frozen(), 2);
  // Then the warm one (one hit) before the hot one (three).
  ASSERT_TRUE(kv.allocate_slots(8, 2 * kBs).is_ok());
  EXPECT_TRUE(kv.frozen().find("warm")->evicted);
  EXPECT_FALSE(kv.frozen().find("hot")->evicted);
  EXPECT_EQ(kv.frozen().n_evictions(), 2);
  // An evicted segment is still listed until deleted; deleting it is fine.
  EXPECT_EQ(kv.frozen().list().size(), 3u);
  ASSERT_TRUE(kv.unfreeze_segment("cold").is_ok());
  EXPECT_EQ(kv.frozen().list().size(), 2u);
}

TEST(FrozenSegments, RecordsKeepIdsAndOrder) {
  FrozenSegments f;
  FrozenSegment a;
  a.id = "a";
  a.blocks = {{1, 1}, {2, 1}};
  ASSERT_TRUE(f.add(a));
  EXPECT_FALSE(f.add(a));
  FrozenSegment b;
  b.id = "b";
  b.blocks = {{1, 1}};
  ASSERT_TRUE(f.add(b));
  EXPECT_EQ(f.n_pinned_blocks(), 2);
  // Equal hits: the older use goes first.
  EXPECT_EQ(f.victim()->id, "a");
  f.record_hit(2, 0);
  EXPECT_EQ(f.victim()->id, "b");
  EXPECT_EQ(f.evict("b").size(), 1u);
  EXPECT_TRUE(f.evict("b").empty());
  EXPECT_EQ(f.n_pinned_blocks(), 2);  // a still pins 1 and 2
  EXPECT_EQ(f.victim()->id, "a");
  auto blocks = f.remove("a");
  ASSERT_TRUE(blocks.has_value());
  EXPECT_EQ(blocks->size(), 2u);
  EXPECT_EQ(f.n_pinned_blocks(), 0);
  EXPECT_EQ(f.victim(), nullptr);
  EXPECT_FALSE(f.remove("a").has_value());
}

}  // namespace
}  // namespace agentkv
