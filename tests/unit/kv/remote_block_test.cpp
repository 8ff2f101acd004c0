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

}  // namespace
}  // namespace agentkv
