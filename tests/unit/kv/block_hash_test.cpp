#include "kv/block_hash.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include <set>
#include <string>
#include <vector>

namespace agentkv {
namespace {

TEST(ExtraKeys, SerialisesTaggedAndLengthPrefixed) {
  const ExtraKeys k{"c", "", "xy"};
  // tag | u32 little-endian length | bytes, lineage(1), tenant(2), salt(3).
  const std::string want(
      "\x01\x01\x00\x00\x00"
      "c"
      "\x02\x00\x00\x00\x00"
      "\x03\x02\x00\x00\x00"
      "xy",
      18);
  EXPECT_EQ(k.serialize(), want);
}

TEST(ExtraKeys, KnownAliasesOfUntypedKeysDoNotCollide) {
  // Namespace "ab" + lineage "c" vs namespace "a" + lineage "bc": same
  // concatenation, different keys.
  ExtraKeys a{.lineage = "c", .tenant = "ab", .cache_salt = ""};
  ExtraKeys b{.lineage = "bc", .tenant = "a", .cache_salt = ""};
  EXPECT_NE(a.serialize(), b.serialize());
  // A cache salt equal to an adapter name (the vLLM/SGLang collision).
  ExtraKeys salt{.lineage = "", .tenant = "", .cache_salt = "lora1"};
  ExtraKeys lora{.lineage = "lora1", .tenant = "", .cache_salt = ""};
  EXPECT_NE(salt.serialize(), lora.serialize());
  EXPECT_NE(hash_block(kRootHash, std::vector<int32_t>{1, 2}, salt.serialize()),
            hash_block(kRootHash, std::vector<int32_t>{1, 2}, lora.serialize()));
  // Tenant/salt boundary.
  ExtraKeys t1{.lineage = "", .tenant = "ab", .cache_salt = ""};
  ExtraKeys t2{.lineage = "", .tenant = "a", .cache_salt = "b"};
  EXPECT_NE(t1.serialize(), t2.serialize());
}

TEST(ExtraKeys, SerialisationIsInjectiveOverCraftedValues) {
  // Values chosen to look like tags and length prefixes of each other.
  const std::vector<std::string> values = {"",
                                           "a",
                                           "ab",
                                           "b",
                                           std::string("\x01", 1),
                                           std::string("\x00", 1),
                                           std::string("\x02\x00\x00\x00\x00", 5),
                                           std::string("a\x02\x01\x00\x00\x00"
                                                       "a",
                                                       7),
                                           std::string("\x03\x00\x00\x00\x00", 5)};
  std::set<std::string> seen;
  size_t combos = 0;
  for (const auto& l : values) {
    for (const auto& t : values) {
      for (const auto& s : values) {
        seen.insert(ExtraKeys{l, t, s}.serialize());
        ++combos;
      }
    }
  }
  EXPECT_EQ(seen.size(), combos);
}

TEST(ExtraKeys, ParseInvertsSerialize) {
  const std::vector<ExtraKeys> cases = {
      {}, {"abc", "", "", false}, {"", "t", "salt", false}, {"lin", "ten", "s", true}, {std::string(300, 'x'), "", "", true}};
  for (const ExtraKeys& k : cases) {
    const std::optional<ExtraKeys> back = ExtraKeys::parse(k.serialize());
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, k);
  }
}

TEST(ExtraKeys, ParseRejectsWhatSerializeNeverWrites) {
  const std::string good = ExtraKeys{"lin", "ten", "s", true}.serialize();
  // Every strict prefix is torn, but the one that ends where the exact
  // block's keys end; one more byte is trailing garbage.
  const size_t exact = ExtraKeys{"lin", "ten", "s", false}.serialize().size();
  for (size_t n = 0; n < good.size(); ++n) {
    if (n == exact) {
      EXPECT_EQ(ExtraKeys::parse(good.substr(0, n)), (ExtraKeys{"lin", "ten", "s", false}));
    } else {
      EXPECT_FALSE(ExtraKeys::parse(good.substr(0, n))) << n;
    }
  }
  EXPECT_FALSE(ExtraKeys::parse(good + "x"));
  std::string swapped = good;
  swapped[0] = static_cast<char>(ExtraKeyKind::kTenant);  // kinds out of order
  EXPECT_FALSE(ExtraKeys::parse(swapped));
  std::string huge = ExtraKeys{}.serialize();
  huge[1] = '\xff';  // a length past the end
  EXPECT_FALSE(ExtraKeys::parse(huge));
  // The approximate key carries no bytes.
  std::string approx = ExtraKeys{}.serialize();
  approx += std::string("\x04\x01\x00\x00\x00x", 6);
  EXPECT_FALSE(ExtraKeys::parse(approx));
}

TEST(BlockHash, DependsOnParentTokensAndKeys) {
  const std::vector<int32_t> toks = {5, 6, 7, 8};
  const std::string e = ExtraKeys{}.serialize();
  const uint64_t h = hash_block(kRootHash, toks, e);
  EXPECT_EQ(h, hash_block(kRootHash, toks, e));  // deterministic
  EXPECT_NE(h, hash_block(h, toks, e));
  EXPECT_NE(h, hash_block(kRootHash, std::vector<int32_t>{5, 6, 7, 9}, e));
  EXPECT_NE(h, hash_block(kRootHash, std::vector<int32_t>{6, 5, 7, 8}, e));
  EXPECT_NE(h, hash_block(kRootHash, toks, ExtraKeys{"x", "", ""}.serialize()));
  // Token bytes cannot move into the key bytes: the token count is hashed.
  const std::vector<int32_t> three = {5, 6, 7};
  const int32_t eight = 8;
  std::string shifted(reinterpret_cast<const char*>(&eight), 4);
  EXPECT_NE(h, hash_block(kRootHash, three, shifted + e));
}

}  // namespace
}  // namespace agentkv
