// The remote tier's values: the block's whole key travels with its K/V, so a
// value that is not exactly the asked block (torn, foreign, stale, another
// tenant's) decodes to nothing.
#include "kv/remote_block.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "kv/kv_manager.h"

namespace agentkv {
namespace {

struct Fixture {
  std::vector<int32_t> tokens = {5, 6, 7, 8};
  std::string extra = ExtraKeys{"", "t1", "s", false}.serialize();
  std::vector<uint8_t> payload = std::vector<uint8_t>(1000);
  RemoteBlockKey key() const { return {11, 22, 33, tokens, extra}; }
  Fixture() { std::iota(payload.begin(), payload.end(), 0); }
};

TEST(RemoteBlock, RoundTrips) {
  Fixture f;
  const std::string v = encode_remote_block(f.key(), f.payload);
  const auto p = decode_remote_block(v, f.key(), f.payload.size());
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(std::equal(p->begin(), p->end(), f.payload.begin(), f.payload.end()));
}

TEST(RemoteBlock, AnyMismatchIsAMiss) {
  Fixture f;
  const std::string v = encode_remote_block(f.key(), f.payload);
  auto miss = [&](RemoteBlockKey k, size_t bytes, const std::string& value) {
    return !decode_remote_block(value, k, bytes).has_value();
  };
  RemoteBlockKey k = f.key();
  k.model_tag = 12;
  EXPECT_TRUE(miss(k, 1000, v));  // another model or geometry
  k = f.key();
  k.hash = 23;
  EXPECT_TRUE(miss(k, 1000, v));
  k = f.key();
  k.parent_hash = 34;
  EXPECT_TRUE(miss(k, 1000, v));
  const std::vector<int32_t> other = {5, 6, 7, 9};
  k = f.key();
  k.tokens = other;
  EXPECT_TRUE(miss(k, 1000, v));
  const std::string other_extra = ExtraKeys{"", "t2", "s", false}.serialize();
  k = f.key();
  k.extra = other_extra;
  EXPECT_TRUE(miss(k, 1000, v));  // another tenant
  EXPECT_TRUE(miss(f.key(), 999, v));  // another block size or dtype
  for (size_t n : {size_t{0}, size_t{3}, size_t{40}, v.size() - 1}) EXPECT_TRUE(miss(f.key(), 1000, v.substr(0, n)));
  EXPECT_TRUE(miss(f.key(), 1000, v + "x"));
  for (size_t at : {size_t{0}, size_t{10}, v.size() - 500, v.size() - 1}) {
    std::string bad = v;
    bad[at] = static_cast<char>(bad[at] ^ 1);  // header, or K/V bytes under the checksum
    EXPECT_TRUE(miss(f.key(), 1000, bad)) << at;
  }
}

TEST(RemoteBlock, NamesSeparateTenantsAndModels) {
  const std::string a = remote_block_name(1, ExtraKeys{"", "t1", "", false}, 7);
  EXPECT_NE(a, remote_block_name(1, ExtraKeys{"", "t2", "", false}, 7));
  EXPECT_NE(a, remote_block_name(1, ExtraKeys{"", "t1", "salt", false}, 7));
  EXPECT_NE(a, remote_block_name(2, ExtraKeys{"", "t1", "", false}, 7));
  EXPECT_EQ(a, remote_block_name(1, ExtraKeys{"lineage", "t1", "", false}, 7));  // the hash carries the lineage
  EXPECT_EQ(a.rfind("akv:1:", 0), 0u);
  EXPECT_NE(remote_model_tag("m", 30, 3, 64, 16, "f16"), remote_model_tag("m", 30, 3, 64, 16, "bf16"));
  EXPECT_NE(remote_model_tag("m", 30, 3, 64, 16, "f16"), remote_model_tag("m", 30, 3, 64, 32, "f16"));
}

// Blocks imported after a cached prefix are found by the next lookup, as if computed.
TEST(KvManagerImport, ImportedBlocksExtendTheCachedPrefix) {
  constexpr int32_t bs = 4;
  KvManager kv(8, bs);
  std::vector<int32_t> t(21);
  std::iota(t.begin(), t.end(), 100);
  const ExtraKeys keys{"", "t", "", false};
  // One block computed here.
  KvBlocks none = kv.get_computed_blocks(std::span<const int32_t>(t).first(5), keys);
  ASSERT_TRUE(kv.allocate_slots(1, 5, none).is_ok());
  kv.commit_full_blocks(1, std::span<const int32_t>(t).first(5), keys);
  kv.free(1);
  // A stale `from` imports nothing.
  EXPECT_TRUE(kv.import_blocks(t, keys, 0, keys, 0, 3).empty());
  const std::vector<int32_t> got = kv.import_blocks(t, keys, 0, keys, 1, 10);
  ASSERT_EQ(got.size(), 4u);  // blocks 1..4: never the block of the last token (index 20)
  kv.release_imported(got);
  EXPECT_EQ(kv.get_computed_blocks(t, keys).n_blocks(), 5);
  EXPECT_EQ(kv.get_computed_blocks(t, ExtraKeys{"", "other", "", false}).n_blocks(), 0);
  // Importing what is cached now imports nothing.
  EXPECT_TRUE(kv.import_blocks(t, keys, 0, keys, 1, 4).empty());
  // A pool that runs short imports what fits.
  KvManager small(2, bs);
  const std::vector<int32_t> two = small.import_blocks(t, keys, 0, keys, 0, 5);
  EXPECT_EQ(two.size(), 2u);
  small.release_imported(two);
  EXPECT_EQ(small.get_computed_blocks(t, keys).n_blocks(), 2);
}

TEST(RemoteSegmentRef, RoundTripsAndAnyMismatchIsAMiss) {
  const RemoteSegmentRef ref{22, 33, 48};
  const std::string v = encode_remote_segment_ref(11, 44, ref);
  const auto got = decode_remote_segment_ref(v, 11, 44);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->hash, 22u);
  EXPECT_EQ(got->parent_hash, 33u);
  EXPECT_EQ(got->pos, 48);
  EXPECT_FALSE(decode_remote_segment_ref(v, 12, 44));  // another model
  EXPECT_FALSE(decode_remote_segment_ref(v, 11, 45));  // another segment hash
  for (size_t n : {size_t{0}, size_t{3}, v.size() - 1})
    EXPECT_FALSE(decode_remote_segment_ref(v.substr(0, n), 11, 44));
  EXPECT_FALSE(decode_remote_segment_ref(v + "x", 11, 44));
  std::string bad = v;
  bad[0] = 'X';
  EXPECT_FALSE(decode_remote_segment_ref(bad, 11, 44));
  EXPECT_FALSE(decode_remote_segment_ref(encode_remote_segment_ref(11, 44, {22, 33, -1}), 11, 44));
  // A block value is not a ref, and a ref not a block value.
  const std::vector<int32_t> tokens = {1, 2};
  const std::string block = encode_remote_block({11, 44, 0, tokens, ""}, std::vector<uint8_t>(8));
  EXPECT_FALSE(decode_remote_segment_ref(block, 11, 44));
  EXPECT_FALSE(decode_remote_block(v, {11, 44, 0, tokens, ""}, 8));
  // Its key is apart from the block's of the same hash, and per tenant.
  const ExtraKeys t1{"", "t1", "", false};
  EXPECT_NE(remote_segment_name(1, t1, 7), remote_block_name(1, t1, 7));
  EXPECT_NE(remote_segment_name(1, t1, 7), remote_segment_name(1, ExtraKeys{"", "t2", "", false}, 7));
}

// Blocks computed elsewhere at positions 8 and 12 of another sequence: found
// by segment matching at any offset, never by a prefix lookup (their parent
// is not here), and replaced by the same content computed here.
TEST(KvManagerImport, SegmentBlocksAreFoundAtAnyOffsetAndNeverAsAPrefix) {
  constexpr int32_t bs = 4;
  KvManager kv(16, bs);
  std::vector<int32_t> t(21);
  std::iota(t.begin(), t.end(), 100);
  const ExtraKeys keys{"", "t", "", false};
  const std::string extra = keys.serialize();
  std::vector<uint64_t> h;  // chain hashes of t's full blocks where they were computed
  uint64_t prev = kRootHash;
  for (int32_t i = 0; i < 5; ++i) {
    prev = hash_block(prev, std::span<const int32_t>(t).subspan(static_cast<size_t>(i) * bs, bs), extra);
    h.push_back(prev);
  }
  auto item = [&](int32_t i) {
    return KvManager::SegmentBlockImport{std::span<const int32_t>(t).subspan(static_cast<size_t>(i) * bs, bs),
                                         h[i], i == 0 ? kRootHash : h[i - 1], i * bs};
  };
  const std::vector<KvManager::SegmentBlockImport> items = {item(2), item(3)};
  const std::vector<int32_t> got = kv.import_segment_blocks(keys, items);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_GE(got[0], 0);
  EXPECT_GE(got[1], 0);
  kv.release_imported(got);
  EXPECT_EQ(kv.get_computed_blocks(t, keys).n_blocks(), 0);  // no parent here: not a prefix
  // Tokens 8..15 of t, 3 tokens into another prompt: one run of two blocks.
  std::vector<int32_t> p = {7, 7, 7};
  p.insert(p.end(), t.begin() + 8, t.begin() + 16);
  p.push_back(9);
  const std::vector<SegmentHit> hits = kv.find_segments(p, 0, keys, 0);
  ASSERT_EQ(hits.size(), 2u);
  EXPECT_EQ(hits[0], (SegmentHit{3, bs, BlockRef{got[0], hits[0].src.generation}, 0, 8}));
  EXPECT_EQ(hits[1].dst_pos, 7);
  EXPECT_EQ(hits[1].src.id, got[1]);
  EXPECT_EQ(hits[1].src_pos, 12);
  EXPECT_TRUE(kv.find_segments(p, 0, ExtraKeys{"", "u", "", false}, 0).empty());  // another tenant
  // Held now: importing again imports nothing.
  const std::vector<int32_t> again = kv.import_segment_blocks(keys, items);
  EXPECT_EQ(again, (std::vector<int32_t>{-1, -1}));
  kv.release_imported(again);
  // A first block chains to the root: a prefix hit.
  const std::vector<KvManager::SegmentBlockImport> first = {item(0)};
  const std::vector<int32_t> b0 = kv.import_segment_blocks(keys, first);
  kv.release_imported(b0);
  EXPECT_EQ(kv.get_computed_blocks(t, keys).n_blocks(), 1);
  // t computed here: its blocks 2 and 3 take the orphans' hashes, so the
  // whole chain is a prefix hit afterwards.
  KvBlocks hit = kv.get_computed_blocks(t, keys);
  ASSERT_TRUE(kv.allocate_slots(1, 21 - hit.n_tokens(), hit).is_ok());
  kv.commit_full_blocks(1, t, keys);
  kv.free(1);
  EXPECT_EQ(kv.get_computed_blocks(t, keys).n_blocks(), 5);
}

}  // namespace
}  // namespace agentkv
