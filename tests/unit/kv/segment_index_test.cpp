// The segment index and KvManager::find_segments: cached runs found at any
// token offset of a new prompt, never under other keys, never stale, never
// through a hash collision.
#include "kv/segment_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kv/kv_manager.h"

namespace agentkv {

void PrintTo(const SegmentHit& h, std::ostream* os) {
  *os << "{dst " << h.dst_pos << " n " << h.n << " src " << h.src.id << "/" << h.src.generation << " offset "
      << h.src_offset << " pos " << h.src_pos << "}";
}

namespace {

std::vector<int32_t> range(int32_t n, int32_t first) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Tokens that occur nowhere else in a test: 1e6 and up, never repeated.
std::vector<int32_t> filler(int32_t n) {
  static int32_t next = 1'000'000;
  next += n;
  return range(n, next - n);
}

std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Lookup, allocate, commit: a prefill with the runner elided.
void prefill(KvManager& kv, RequestId id, const std::vector<int32_t>& tokens, const ExtraKeys& keys = {}) {
  KvBlocks hit = kv.get_computed_blocks(tokens, keys);
  Status st = kv.allocate_slots(id, static_cast<int32_t>(tokens.size()) - hit.n_tokens(), hit);
  ASSERT_TRUE(st.is_ok()) << st.message();
  kv.commit_full_blocks(id, tokens, keys);
}

// Where the KV of one prompt position comes from.
struct Src {
  int32_t block = -1;  // -1: not covered
  int32_t offset = 0;
  int32_t pos = 0;
  bool operator==(const Src&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Src& s) {
  return os << "{block " << s.block << " offset " << s.offset << " pos " << s.pos << "}";
}

// Empty when equal, else the positions that differ.
std::string diff(const std::vector<Src>& got, const std::vector<Src>& want) {
  std::ostringstream os;
  for (size_t p = 0; p < std::max(got.size(), want.size()); ++p) {
    const Src g = p < got.size() ? got[p] : Src{}, w = p < want.size() ? want[p] : Src{};
    if (!(g == w)) os << "position " << p << ": got " << g << ", want " << w << "\n";
  }
  return os.str();
}

// Per prompt position, after checking the shape of the hit list: sorted,
// non-overlapping, non-empty, each inside one block.
std::vector<Src> expand(const std::vector<SegmentHit>& hits, size_t n_prompt, int32_t bs) {
  std::vector<Src> out(n_prompt);
  int32_t end = 0;
  for (const SegmentHit& h : hits) {
    EXPECT_GT(h.n, 0);
    EXPECT_GE(h.dst_pos, end) << "hits unsorted or overlapping";
    EXPECT_GE(h.src_offset, 0);
    EXPECT_LE(h.src_offset + h.n, bs) << "a hit leaves its source block";
    for (int32_t j = 0; j < h.n; ++j) out.at(h.dst_pos + j) = {h.src.id, h.src_offset + j, h.src_pos + j};
    end = h.dst_pos + h.n;
  }
  return out;
}

// Expected: prompt positions [dst, dst + n) come from `table` at source
// positions [src, src + n).
void expect_from(std::vector<Src>* want, const std::vector<int32_t>& table, int32_t bs, int32_t dst,
                 int32_t src, int32_t n) {
  for (int32_t j = 0; j < n; ++j) {
    const int32_t p = src + j;
    (*want)[dst + j] = {table[p / bs], p % bs, p};
  }
}

TEST(SegmentIndex, OneEntryPerBlockAndPerHash) {
  SegmentIndex idx(4);
  EXPECT_EQ(idx.find(5), nullptr);
  idx.add({0, 1}, 5, 0, {});
  ASSERT_NE(idx.find(5), nullptr);
  EXPECT_EQ(idx.find(5)->block, (BlockRef{0, 1}));
  idx.add({1, 1}, 5, 16, {0, 1});  // same hash, newer: takes it over
  EXPECT_EQ(idx.find(5)->block, (BlockRef{1, 1}));
  EXPECT_EQ(idx.find(5)->pos, 16);
  EXPECT_EQ(idx.size(), 1);
  EXPECT_EQ(idx.next_of(0), (BlockRef{1, 1}));
  idx.add({0, 2}, 6, 0, {});
  idx.add({0, 2}, 7, 0, {});  // re-registered under another hash: the old one goes
  EXPECT_EQ(idx.find(6), nullptr);
  EXPECT_EQ(idx.find(7)->block, (BlockRef{0, 2}));
  EXPECT_EQ(idx.size(), 2);
  idx.erase(1);
  EXPECT_EQ(idx.find(5), nullptr);
  idx.erase(0);
  EXPECT_EQ(idx.next_of(0), BlockRef{});
  EXPECT_EQ(idx.size(), 0);
}

class FindSegments : public ::testing::TestWithParam<int32_t> {};

TEST_P(FindSegments, CachedDocumentIsFoundAtAnyOffset) {
  const int32_t bs = GetParam();
  KvManager kv(256, bs);
  const std::vector<int32_t> doc = range(5 * bs + bs / 2, 100);
  prefill(kv, 1, cat({doc, {7}}));  // 5 full blocks: doc[0, 5 bs)
  const std::vector<int32_t> table = kv.block_table(1);
  EXPECT_EQ(kv.segments().size(), 5);
  std::vector<int32_t> offsets = {0, 1, 7, 16, 33};
  std::mt19937 rng(static_cast<uint32_t>(bs));
  for (int i = 0; i < 20; ++i) offsets.push_back(std::uniform_int_distribution<int32_t>(0, 200)(rng));
  for (int32_t off : offsets) {
    const std::vector<int32_t> prompt = cat({filler(off), doc, filler(2)});
    const auto hits = kv.find_segments(prompt, 0, {}, 2 * bs);
    std::vector<Src> want(prompt.size());
    expect_from(&want, table, bs, off, 0, 5 * bs);
    EXPECT_EQ(diff(expand(hits, prompt.size(), bs), want), "") << "offset " << off;
    for (const SegmentHit& h : hits) EXPECT_EQ(h.dst_pos - h.src_pos, off);
  }
}

TEST_P(FindSegments, DocumentInTheGeneratedPartIsFound) {
  const int32_t bs = GetParam();
  KvManager kv(256, bs);
  const std::vector<int32_t> doc = range(3 * bs + 1, 100);
  std::vector<int32_t> seq = filler(3);
  prefill(kv, 1, seq);
  for (int32_t t : doc) {  // the request generates the document
    ASSERT_TRUE(kv.allocate_slots(1, 1).is_ok());
    seq.push_back(t);
    kv.commit_full_blocks(1, seq, {});
  }
  const int32_t committed = static_cast<int32_t>(seq.size()) / bs * bs;
  const std::vector<int32_t> table = kv.block_table(1);
  kv.free(1);
  const std::vector<int32_t> prompt = cat({filler(5), doc, filler(2)});
  std::vector<Src> want(prompt.size());
  expect_from(&want, table, bs, 5, 3, committed - 3);
  EXPECT_EQ(diff(expand(kv.find_segments(prompt, 0, {}, 0), prompt.size(), bs), want), "");
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, FindSegments, ::testing::Values(4, 16));

TEST(KvSegments, HitSpansConsecutiveSourceBlocks) {
  constexpr int32_t bs = 8;
  KvManager kv(64, bs);
  const std::vector<int32_t> doc = range(4 * bs, 100);
  prefill(kv, 1, cat({filler(5), doc, filler(bs)}));  // doc at source positions [5, 37)
  const auto& t = kv.block_table(1);
  const auto ref = [&](int32_t i) { return kv.pool().ref_of(t[i]); };
  const std::vector<int32_t> prompt = cat({filler(2), doc, filler(3)});
  // Partial, whole, whole, whole, partial: one source, one delta (-3).
  const std::vector<SegmentHit> want = {
      {2, 3, ref(0), 5, 5},   {5, 8, ref(1), 0, 8},   {13, 8, ref(2), 0, 16},
      {21, 8, ref(3), 0, 24}, {29, 5, ref(4), 0, 32},
  };
  EXPECT_EQ(kv.find_segments(prompt, 0, {}, 0), want);
}

TEST(KvSegments, RunKeepsOneSourceWhenABlockIsCachedTwice) {
  constexpr int32_t bs = 4;
  KvManager kv(64, bs);
  const std::vector<int32_t> x = range(bs, 100), y = range(bs, 200), z = range(bs, 300);
  prefill(kv, 1, cat({x, y, z, {1}}));
  const std::vector<int32_t> t1 = kv.block_table(1);
  prefill(kv, 2, cat({filler(2 * bs), y, {1}}));  // y again, later, at position 2 bs: owns y's hash
  const std::vector<int32_t> prompt = cat({filler(1), x, y, z, filler(1)});
  std::vector<Src> want(prompt.size());
  expect_from(&want, t1, bs, 1, 0, 3 * bs);
  EXPECT_EQ(diff(expand(kv.find_segments(prompt, 0, {}, 0), prompt.size(), bs), want), "");
  // Alone, y is found in its most recent copy.
  const std::vector<int32_t> only_y = cat({y, filler(1)});
  const auto hits = kv.find_segments(only_y, 0, {}, 0);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].src.id, kv.block_table(2)[2]);
  EXPECT_EQ(hits[0].src_pos, 2 * bs);
}

TEST(KvSegments, TwoDocumentsFromDifferentRequestsInSwappedOrder) {
  constexpr int32_t bs = 4;
  KvManager kv(64, bs);
  const std::vector<int32_t> a = range(3 * bs, 100), b = range(2 * bs + 2, 200);
  prefill(kv, 1, cat({a, {1}}));
  prefill(kv, 2, cat({filler(3), b, filler(bs)}));  // b at source [3, 13): all committed
  const std::vector<int32_t> ta = kv.block_table(1), tb = kv.block_table(2);
  for (int32_t gap : {0, 1, 5}) {
    const std::vector<int32_t> prompt = cat({filler(5), b, filler(gap), a, filler(2)});
    std::vector<Src> want(prompt.size());
    expect_from(&want, tb, bs, 5, 3, static_cast<int32_t>(b.size()));
    expect_from(&want, ta, bs, 5 + static_cast<int32_t>(b.size()) + gap, 0, static_cast<int32_t>(a.size()));
    EXPECT_EQ(diff(expand(kv.find_segments(prompt, 0, {}, 2 * bs), prompt.size(), bs), want), "")
        << "gap " << gap;
  }
}

TEST(KvSegments, OtherNamespaceOrLineageNeverHits) {
  constexpr int32_t bs = 4;
  KvManager kv(64, bs);
  const ExtraKeys alice{.lineage = "", .tenant = "alice", .cache_salt = ""};
  const std::vector<int32_t> doc = range(3 * bs, 100);
  prefill(kv, 1, cat({doc, {1}}), alice);
  const std::vector<int32_t> prompt = cat({filler(3), doc, filler(1)});
  EXPECT_EQ(kv.find_segments(prompt, 0, alice, 0).size(), 3u);
  for (const ExtraKeys& other : {ExtraKeys{"", "bob", ""}, ExtraKeys{"", "alice", "salt"},
                                 ExtraKeys{"adapter", "alice", ""}, ExtraKeys{}}) {
    EXPECT_TRUE(kv.find_segments(prompt, 0, other, 0).empty()) << other.tenant << "/" << other.cache_salt;
  }
}

uint64_t keys_blind_hash(uint64_t parent, std::span<const int32_t> tokens, std::string_view) {
  return hash_block(parent, tokens, "");
}

TEST(KvSegments, OtherNamespaceNeverHitsEvenWhenTheHashIgnoresIt) {
  constexpr int32_t bs = 4;
  KvManager kv(64, bs, keys_blind_hash);
  const ExtraKeys alice{"", "alice", ""}, bob{"", "bob", ""};
  const std::vector<int32_t> doc = range(3 * bs, 100);
  prefill(kv, 1, cat({filler(1), doc, filler(3)}), alice);  // doc at source [1, 13)
  const std::vector<int32_t> prompt = cat({doc, filler(1)});
  EXPECT_FALSE(kv.find_segments(prompt, 0, alice, 0).empty());
  EXPECT_TRUE(kv.find_segments(prompt, 0, bob, 0).empty());
}

// Equal for any order of the block's tokens: a collision we can aim.
uint64_t order_blind_hash(uint64_t parent, std::span<const int32_t> tokens, std::string_view extra) {
  std::vector<int32_t> sorted(tokens.begin(), tokens.end());
  std::sort(sorted.begin(), sorted.end());
  return hash_block(parent, sorted, extra);
}

TEST(KvSegments, InjectedHashCollisionNeverHits) {
  constexpr int32_t bs = 4;
  KvManager kv(64, bs, order_blind_hash);
  const std::vector<int32_t> doc = range(3 * bs, 100);
  prefill(kv, 1, cat({doc, {1}}));
  std::vector<int32_t> twisted = doc;  // each block reversed: same hashes, other tokens
  for (int32_t i = 0; i < 3; ++i) std::reverse(twisted.begin() + i * bs, twisted.begin() + (i + 1) * bs);
  ASSERT_EQ(order_blind_hash(kRootHash, std::span(twisted).first(bs), ""),
            order_blind_hash(kRootHash, std::span(doc).first(bs), ""));
  EXPECT_TRUE(kv.find_segments(cat({filler(2), twisted, filler(1)}), 0, {}, 0).empty());
  EXPECT_EQ(kv.find_segments(cat({filler(2), doc, filler(1)}), 0, {}, 0).size(), 3u);
}

TEST(KvSegments, EvictedSourceBlocksAreNeverReturned) {
  constexpr int32_t bs = 4;
  KvManager kv(4, bs);
  const std::vector<int32_t> doc = range(3 * bs, 100);
  prefill(kv, 1, cat({doc, {1}}));
  const std::vector<int32_t> t = kv.block_table(1);
  kv.free(1);  // 3 cached, 1 free
  const std::vector<int32_t> prompt = cat({filler(1), doc, filler(1)});
  const auto before = kv.find_segments(prompt, 0, {}, 0);
  ASSERT_EQ(before.size(), 3u);
  for (const SegmentHit& h : before) EXPECT_TRUE(kv.segment_hit_valid(h));

  // One free block plus the doc's tail block (released first, evicted first).
  ASSERT_TRUE(kv.allocate_slots(2, 2 * bs).is_ok());
  EXPECT_EQ(kv.segments().size(), 2);
  EXPECT_FALSE(kv.segment_hit_valid(before[2]));
  EXPECT_TRUE(kv.segment_hit_valid(before[1]));
  std::vector<Src> want(prompt.size());
  expect_from(&want, t, bs, 1, 0, 2 * bs);
  EXPECT_EQ(diff(expand(kv.find_segments(prompt, 0, {}, 0), prompt.size(), bs), want), "");

  // The re-allocated blocks now hold other content; the doc is gone for good.
  ASSERT_TRUE(kv.allocate_slots(3, 2 * bs).is_ok());
  kv.commit_full_blocks(2, filler(2 * bs), {});
  EXPECT_TRUE(kv.find_segments(prompt, 0, {}, 0).empty());
  for (const SegmentHit& h : before) EXPECT_FALSE(kv.segment_hit_valid(h));
  EXPECT_EQ(kv.segments().size(), 2);  // request 2's two blocks
  EXPECT_LE(kv.segments().size(), kv.pool().n_blocks());
}

TEST(KvSegments, ReallocatedNeighbourIsNeverUsedToExtend) {
  constexpr int32_t bs = 4;
  KvManager kv(16, bs);
  const std::vector<int32_t> p = range(bs, 100), d = range(bs, 200), z = range(bs, 300);
  ASSERT_TRUE(kv.allocate_slots(2, bs + 1).is_ok());  // request 2 started before request 1 committed
  prefill(kv, 1, cat({p, d, {1}}));                   // P at position 0, D at bs
  const std::vector<int32_t> t1 = kv.block_table(1);
  kv.free(1);
  // Request 2's held copy of P takes over the index entry; request 1's P block
  // goes free and is handed to request 3 for Z, at another position.
  kv.commit_full_blocks(2, cat({p, {1}}), {});
  prefill(kv, 3, cat({p, z, {1}}));
  ASSERT_EQ(kv.block_table(3)[1], t1[0]);
  // D is still cached, but what now sits in its old predecessor's block is
  // not the KV that preceded D, even where its tokens match the prompt.
  const std::vector<int32_t> prompt = cat({filler(1), {z[2], z[3]}, d, filler(1)});
  std::vector<Src> want(prompt.size());
  expect_from(&want, t1, bs, 3, bs, bs);
  EXPECT_EQ(diff(expand(kv.find_segments(prompt, 0, {}, 0), prompt.size(), bs), want), "");
}

TEST(KvSegments, MinTokensDropsShortContiguousGroups) {
  constexpr int32_t bs = 4;
  KvManager kv(64, bs);
  const std::vector<int32_t> a = range(2 * bs, 100), b = range(3 * bs, 200);
  prefill(kv, 1, cat({a, {1}}));
  prefill(kv, 2, cat({b, {1}}));
  const std::vector<int32_t> apart = cat({filler(1), a, filler(1), b, filler(1)});
  const auto covered = [&](const std::vector<int32_t>& prompt, int32_t min_tokens) {
    int32_t n = 0;
    for (const SegmentHit& h : kv.find_segments(prompt, 0, {}, min_tokens)) n += h.n;
    return n;
  };
  EXPECT_EQ(covered(apart, 2 * bs), 5 * bs);
  EXPECT_EQ(covered(apart, 2 * bs + 1), 3 * bs);
  EXPECT_EQ(covered(apart, 3 * bs + 1), 0);
  // Adjacent, a and b form one group of 5 blocks.
  const std::vector<int32_t> adjacent = cat({filler(1), a, b, filler(1)});
  EXPECT_EQ(covered(adjacent, 5 * bs), 5 * bs);
  EXPECT_EQ(covered(adjacent, 5 * bs + 1), 0);
}

TEST(KvSegments, LastPromptTokenIsNeverCovered) {
  constexpr int32_t bs = 4;
  KvManager kv(64, bs);
  const std::vector<int32_t> doc = range(3 * bs, 100);
  prefill(kv, 1, cat({doc, {1}}));
  const std::vector<int32_t> t = kv.block_table(1);
  for (int32_t off : {0, 2}) {
    const std::vector<int32_t> prompt = cat({filler(off), doc});  // ends with the doc
    std::vector<Src> want(prompt.size());
    expect_from(&want, t, bs, off, 0, 3 * bs - 1);
    EXPECT_EQ(diff(expand(kv.find_segments(prompt, 0, {}, 0), prompt.size(), bs), want), "")
        << "offset " << off;
  }
  EXPECT_TRUE(kv.find_segments(std::vector<int32_t>{100}, 0, {}, 0).empty());
  EXPECT_TRUE(kv.find_segments(std::vector<int32_t>{}, 0, {}, 0).empty());
}

TEST(KvSegments, PrefixRegionIsNeverCovered) {
  constexpr int32_t bs = 4;
  KvManager kv(64, bs);
  const std::vector<int32_t> doc = range(4 * bs, 100);
  prefill(kv, 1, cat({doc, {1}}));
  const std::vector<int32_t> t = kv.block_table(1);
  const std::vector<int32_t> prompt = cat({doc, filler(3)});
  for (int32_t from : {0, 4, 5, 11}) {
    std::vector<Src> want(prompt.size());
    expect_from(&want, t, bs, from, from, 4 * bs - from);
    EXPECT_EQ(diff(expand(kv.find_segments(prompt, from, {}, 0), prompt.size(), bs), want), "")
        << "from " << from;
  }
  // Fewer than a whole block left after `from`: nothing to anchor a run.
  EXPECT_TRUE(kv.find_segments(prompt, 13, {}, 0).empty());
  EXPECT_TRUE(kv.find_segments(prompt, 100, {}, 0).empty());
}

}  // namespace
}  // namespace agentkv
