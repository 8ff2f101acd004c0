#include "kv/prefix_index.h"

#include <gtest/gtest.h>

namespace agentkv {
namespace {

TEST(PrefixIndex, CollidingHashIsAMissNotAWrongHit) {
  PrefixIndex idx(4);
  BlockKey a{.hash = 42, .parent = {}, .tokens = {1, 2, 3, 4}, .extra = "x"};
  BlockKey b = a;
  b.tokens = {9, 9, 9, 9};  // same hash, other content
  ASSERT_TRUE(idx.insert(0, a));
  EXPECT_EQ(idx.find(a), 0);
  EXPECT_EQ(idx.find(b), -1);
  EXPECT_FALSE(idx.insert(1, b));  // the hash is taken
  const BlockKey c{.hash = 42, .parent = {}, .tokens = {1, 2, 3, 4}, .extra = "y"};
  EXPECT_EQ(idx.find(c), -1);  // same tokens, other keys
  BlockKey d = a;
  d.parent = {3, 1};
  EXPECT_EQ(idx.find(d), -1);  // same tokens, other parent
  EXPECT_EQ(idx.holder(42), 0);
  idx.erase(0);
  EXPECT_EQ(idx.find(a), -1);
  EXPECT_EQ(idx.holder(42), -1);
  EXPECT_TRUE(idx.insert(1, b));
  EXPECT_EQ(idx.find(b), 1);
  EXPECT_EQ(idx.size(), 1);
}

}  // namespace
}  // namespace agentkv
