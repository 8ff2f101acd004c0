// KV components (kv/kv_component.h): a slot's row lives for the block life
// it was written in, copies carry it, and a block handed out again reads as
// absent.
#include "kv/kv_component.h"

#include <gtest/gtest.h>

namespace agentkv {
namespace {

TEST(KvComponent, RowsLiveForTheirBlockLife) {
  auto c = KvComponent::create(/*n_blocks=*/4, /*block_size=*/2, /*width=*/3);
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->bytes_per_block(), 2 * (3 * 4 + 4));
  EXPECT_TRUE(c->read(5, 0).empty());  // never written
  std::span<float> w = c->write(5, 7);
  w[0] = 1, w[1] = 2, w[2] = 3;
  ASSERT_EQ(c->read(5, 7).size(), 3u);
  EXPECT_EQ(c->read(5, 7)[2], 3.0f);
  EXPECT_TRUE(c->read(5, 8).empty());  // the block was handed out again
  EXPECT_TRUE(c->read(-1, 7).empty());
  EXPECT_TRUE(c->read(8, 7).empty());
  EXPECT_TRUE(c->copy(5, 7, 0, 2));
  EXPECT_EQ(c->read(0, 2)[1], 2.0f);
  EXPECT_FALSE(c->copy(5, 6, 1, 2));  // a stale source copies nothing
  EXPECT_TRUE(c->read(1, 2).empty());
  EXPECT_FALSE(KvComponent::create(0, 2, 3).is_ok());
  EXPECT_FALSE(KvComponent::create(4, 2, 0).is_ok());
}

}  // namespace
}  // namespace agentkv
