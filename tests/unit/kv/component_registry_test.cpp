// The KV component registry (kv/component_registry.h): what is declared is
// what is sized and created, once per role.
#include "kv/component_registry.h"

#include <gtest/gtest.h>

namespace agentkv {
namespace {

TEST(KvComponentRegistry, SizesAndCreatesWhatIsDeclared) {
  KvComponentRegistry r;
  EXPECT_EQ(r.bytes_per_block(16), 0);
  ASSERT_TRUE(r.declare({ComponentRole::kOwnerTags, 1}).is_ok());
  ASSERT_TRUE(r.declare({ComponentRole::kCaptureHidden, 8, 3}).is_ok());
  EXPECT_TRUE(r.declared(ComponentRole::kOwnerTags));
  EXPECT_FALSE(r.declared(ComponentRole::kCaptureInfluence));
  EXPECT_EQ(r.decl(ComponentRole::kCaptureHidden)->layer, 3);
  // Each slot: its floats and a 32-bit generation stamp.
  EXPECT_EQ(r.bytes_per_block(16), 16 * (1 * 4 + 4) + 16 * (8 * 4 + 4));
  EXPECT_EQ(r.get(ComponentRole::kOwnerTags), nullptr);  // not created yet
  ASSERT_TRUE(r.create_all(/*n_blocks=*/5, /*block_size=*/16).is_ok());
  ASSERT_NE(r.get(ComponentRole::kCaptureHidden), nullptr);
  EXPECT_EQ(r.get(ComponentRole::kCaptureHidden)->width(), 8);
  EXPECT_EQ(r.get(ComponentRole::kCaptureHidden)->bytes_per_block(), 16 * (8 * 4 + 4));
  EXPECT_EQ(r.get(ComponentRole::kCaptureInfluence), nullptr);
  EXPECT_EQ(r.get(ComponentRole::kCaptureHidden)->write(5 * 16 - 1, 0).size(), 8u);  // the last slot exists
}

TEST(KvComponentRegistry, RefusesBadDeclarations) {
  KvComponentRegistry r;
  EXPECT_FALSE(r.declare({ComponentRole::kOwnerTags, 0}).is_ok());       // no width
  EXPECT_FALSE(r.declare({ComponentRole::kOwnerHidden, 8}).is_ok());     // a hidden state needs its layer
  EXPECT_FALSE(r.declare({ComponentRole::kOwnerHidden, 8, 0}).is_ok());  // layer 0 needs no snapshot
  EXPECT_FALSE(
      r.declare({ComponentRole::kCaptureInfluence, 1, 2}).is_ok());  // only hidden states take a layer
  ASSERT_TRUE(r.declare({ComponentRole::kCaptureInfluence, 1}).is_ok());
  EXPECT_FALSE(r.declare({ComponentRole::kCaptureInfluence, 1}).is_ok());  // twice
  EXPECT_EQ(r.bytes_per_block(2), 2 * 8);                                  // the refused ones count nothing
}

// The LR pool: declared by both LR schemes with the same size, refused with
// another; it adds nothing to the per-slot components' bytes.
TEST(KvComponentRegistry, ThePoolIsDeclaredOnceInSize) {
  KvComponentRegistry r;
  EXPECT_FALSE(r.pool().has_value());
  EXPECT_FALSE(r.declare_pool({0, 3}).is_ok());  // no width
  EXPECT_FALSE(r.declare_pool({8, 0}).is_ok());  // no blocks
  EXPECT_FALSE(r.pool().has_value());
  ASSERT_TRUE(r.declare_pool({8, 3}).is_ok());
  ASSERT_TRUE(r.declare_pool({8, 3}).is_ok());    // the second LR scheme
  EXPECT_FALSE(r.declare_pool({16, 3}).is_ok());  // another size
  ASSERT_TRUE(r.pool().has_value());
  EXPECT_EQ(r.pool()->width, 8);
  EXPECT_EQ(r.pool()->blocks_per_kv_block, 3);
  EXPECT_EQ(r.bytes_per_block(16), 0);
}

}  // namespace
}  // namespace agentkv
