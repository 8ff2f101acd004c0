// SegmentIndex bookkeeping: one entry per block and per hash.
#include "kv/segment_index.h"

#include <gtest/gtest.h>

namespace agentkv {
namespace {

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

}  // namespace
}  // namespace agentkv
