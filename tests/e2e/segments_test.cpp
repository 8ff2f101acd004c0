// Frozen segments on the real model, through the serving engine (issue 11,
// "Frozen segment pool"): a segment computed by create_segment is hit from
// any offset of a later prompt under naive reuse and as a prefix, only in
// its tenant's namespace; deleting it makes later prompts recompute; bad
// segments fail cleanly and pin nothing; above the watermark the least-hit
// segment is evicted and the request that needed the room succeeds.
// Skipped when the model file is absent (failed under CI).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "../ci_required.h"
#include "agentkv/serving.h"
#include "serving_util.h"

namespace agentkv {
namespace {

using namespace agentkv::testing;

constexpr int32_t kBs = 16;

class Segments : public ::testing::Test {
 protected:
  void SetUp() override {
    AGENTKV_REQUIRE(!std::filesystem::exists(model_path()), "model not found: " << model_path());
  }
  std::unique_ptr<ServingEngine> make(int64_t kv_tokens = 0) {
    ServingOptions o;
    o.model_path = model_path();
    o.n_threads = 2;
    o.block_size = kBs;
    o.kv_cache_mb = 64;
    o.kv_cache_tokens = kv_tokens;
    o.max_batch_tokens = 2048;
    o.max_model_len = 512;
    auto e = create_serving_engine(o);
    EXPECT_TRUE(e.is_ok()) << e.status().message();
    return e.is_ok() ? std::move(e).value() : nullptr;
  }
  static Outcome ask(ServingEngine& e, std::vector<int32_t> prompt, const std::string& tenant,
                     const std::string& scheme = "naive") {
    ServeRequest r = greedy_request(std::move(prompt), 1);
    r.tenant = tenant;
    r.kv_sharing = scheme;
    std::vector<ServeRequest> v;
    v.push_back(std::move(r));
    return serve_requests(e, std::move(v))[0];
  }
  static SegmentInfo create(ServingEngine& e, std::vector<int32_t> tokens, const std::string& tenant) {
    SegmentSpec s;
    s.tokens = std::move(tokens);
    s.tenant = tenant;
    Result<SegmentInfo> r = e.create_segment(s);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    return r.is_ok() ? *r : SegmentInfo{};
  }
};

TEST_F(Segments, HitFromAnyOffsetOnlyByItsTenantUntilDeleted) {
  auto eng = make();
  ASSERT_TRUE(eng);
  const auto d = doc(1, 85);
  const SegmentInfo info = create(*eng, d, "a");
  EXPECT_EQ(info.id, "seg-1");
  EXPECT_EQ(info.tokens, 85);
  EXPECT_EQ(info.blocks, 5);
  EXPECT_FALSE(info.evicted);
  EXPECT_EQ(eng->stats().frozen_segments, 1);
  EXPECT_EQ(eng->stats().frozen_blocks, 5);

  for (int off : {1, 7, 16, 33, 150}) {
    const Outcome o = ask(*eng, cat({doc(100 + off, off), d, doc(7, 4)}), "a");
    ASSERT_EQ(o.finish, ServeFinish::kLength) << o.error;
    EXPECT_GE(o.reused, 5 * kBs) << "offset " << off;
  }
  // As a prefix, under the exact scheme too.
  EXPECT_GE(ask(*eng, cat({d, doc(8, 4)}), "a", "none").cached, 5 * kBs);
  std::vector<SegmentInfo> mine = eng->list_segments("a");
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_GT(mine[0].hits, 0);
  EXPECT_GE(mine[0].last_used, mine[0].created);

  // Another tenant neither sees, deletes nor hits it.
  EXPECT_TRUE(eng->list_segments("b").empty());
  EXPECT_EQ(eng->delete_segment(info.id, "b").code(), ErrorCode::kNotFound);
  const Outcome other = ask(*eng, cat({doc(200, 9), d, doc(7, 4)}), "b");
  EXPECT_EQ(other.reused, 0);
  EXPECT_EQ(other.cached, 0);

  // Deleted: later prompts recompute it.
  ASSERT_TRUE(eng->delete_segment(info.id, "a").is_ok());
  EXPECT_TRUE(eng->list_segments("a").empty());
  EXPECT_EQ(eng->stats().frozen_blocks, 0);
  EXPECT_EQ(ask(*eng, cat({doc(300, 11), d, doc(7, 4)}), "a").reused, 0);
  EXPECT_EQ(eng->delete_segment(info.id, "a").code(), ErrorCode::kNotFound);
}

TEST_F(Segments, BadSegmentsPinNothing) {
  auto eng = make();
  ASSERT_TRUE(eng);
  auto bad = [&](std::vector<int32_t> tokens) {
    SegmentSpec s;
    s.tokens = std::move(tokens);
    return eng->create_segment(s).status().code();
  };
  EXPECT_EQ(bad({}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad(doc(1, 5)), ErrorCode::kInvalidArgument);  // shorter than a block
  EXPECT_EQ(bad(cat({doc(1, 20), {eng->vocab_size()}})), ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad(cat({doc(1, 20), {-1}})), ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad(doc(1, 512)), ErrorCode::kOutOfRange);  // max_model_len 512
  const ServingStats st = eng->stats();
  EXPECT_EQ(st.frozen_segments, 0);
  EXPECT_EQ(st.frozen_blocks, 0);
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_EQ(eng->delete_segment("seg-404", "").code(), ErrorCode::kNotFound);
  // Still serving, and the next segment works.
  EXPECT_EQ(ask(*eng, doc(2, 20), "").finish, ServeFinish::kLength);
  EXPECT_EQ(create(*eng, doc(3, 32), "").blocks, 2);
}

TEST_F(Segments, WatermarkEvictsTheLeastHitAndRequestsSucceed) {
  auto eng = make(40 * kBs);  // 40 blocks: the watermark is 36
  ASSERT_TRUE(eng);
  std::vector<SegmentInfo> segs;
  for (uint32_t i = 0; i < 3; ++i)
    segs.push_back(create(*eng, doc(10 + i, 4 * kBs), "a"));  // 12 blocks pinned
  EXPECT_EQ(eng->stats().frozen_blocks, 12);
  // Hit every segment but the second (12 + 5 blocks: under the watermark).
  for (uint32_t i : {0u, 2u}) {
    EXPECT_GE(ask(*eng, cat({doc(50 + i, 3), doc(10 + i, 4 * kBs), {5}}), "a").reused, 4 * kBs);
  }
  eng->list_segments("a");  // the engine thread is past the requests' stats
  EXPECT_EQ(eng->stats().segment_evictions, 0);
  // A 25-block prompt takes the used blocks to 37: the unhit segment goes,
  // only it, and the request succeeds.
  const Outcome o = ask(*eng, doc(99, 24 * kBs + 5), "a", "none");
  EXPECT_EQ(o.finish, ServeFinish::kLength) << o.error;
  const std::vector<SegmentInfo> list =
      eng->list_segments("a");  // runs on the engine thread: after its stats
  const ServingStats st = eng->stats();
  EXPECT_EQ(st.segment_evictions, 1);
  EXPECT_EQ(st.frozen_segments, 2);
  EXPECT_EQ(st.frozen_blocks, 8);
  ASSERT_EQ(list.size(), 3u);
  for (const SegmentInfo& s : list) EXPECT_EQ(s.evicted, s.id == segs[1].id) << s.id;
  // A prompt that needed the evicted segment recomputes it and succeeds.
  const Outcome again = ask(*eng, cat({doc(77, 3), doc(11, 4 * kBs), {5}}), "a");
  EXPECT_EQ(again.finish, ServeFinish::kLength) << again.error;
  // Deleting an evicted segment drops it from the listing.
  ASSERT_TRUE(eng->delete_segment(segs[1].id, "a").is_ok());
  EXPECT_EQ(eng->list_segments("a").size(), 2u);
}

}  // namespace
}  // namespace agentkv
