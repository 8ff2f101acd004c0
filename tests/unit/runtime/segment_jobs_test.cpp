#include "runtime/segment_jobs.h"

#include <gtest/gtest.h>

namespace agentkv {
namespace {

FrozenSegment frozen(const std::string& id) {
  FrozenSegment s;
  s.id = id;
  s.tokens = {1, 2, 3};
  return s;
}

TEST(SegmentJobs, NamesCountUpPastFrozenOnes) {
  FrozenSegments f;
  ASSERT_TRUE(f.add(frozen("seg-2")));
  SegmentJobs jobs;
  EXPECT_EQ(*jobs.name("", f), "seg-1");
  EXPECT_EQ(*jobs.name("", f), "seg-3");  // seg-2 is frozen already
}

TEST(SegmentJobs, ARestoredNameMovesTheCounterPastIt) {
  FrozenSegments f;
  SegmentJobs jobs;
  EXPECT_EQ(*jobs.name("seg-41", f), "seg-41");
  EXPECT_EQ(*jobs.name("seg-7", f), "seg-7");  // lower: the counter stays past 41
  EXPECT_EQ(*jobs.name("seg-x", f), "seg-x");  // not a number: no effect
  EXPECT_EQ(*jobs.name("", f), "seg-42");
}

TEST(SegmentJobs, ANameTakenByASegmentOrAPrefillIsRefused) {
  FrozenSegments f;
  ASSERT_TRUE(f.add(frozen("docs")));
  SegmentJobs jobs;
  Result<std::string> r = jobs.name("docs", f);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("'docs' is taken"), std::string::npos);
  jobs.add(7, "under-way", SegmentSpec{}, std::make_shared<std::promise<Result<SegmentInfo>>>());
  EXPECT_FALSE(jobs.name("under-way", f).is_ok());
}

TEST(SegmentJobs, ACancelledOrFailedPrefillAnswersWithTheReasonAndPinsNothing) {
  KvManager kv(8, 16);
  for (ServeFinish why : {ServeFinish::kCancelled, ServeFinish::kError}) {
    SegmentJobs jobs;
    auto done = std::make_shared<std::promise<Result<SegmentInfo>>>();
    std::future<Result<SegmentInfo>> answer = done->get_future();
    jobs.add(3, "s", SegmentSpec{}, done);
    bool pinned = false;
    jobs.finish(4, why, "boom", kv, [&] { pinned = true; });  // another request: nothing
    EXPECT_EQ(answer.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
    jobs.finish(3, why, "boom", kv, [&] { pinned = true; });
    Result<SegmentInfo> r = answer.get();
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(),
              why == ServeFinish::kCancelled ? ErrorCode::kUnavailable : ErrorCode::kInternal);
    if (why == ServeFinish::kError) {
      EXPECT_NE(r.status().message().find("boom"), std::string::npos);
    }
    EXPECT_FALSE(pinned);
    EXPECT_EQ(kv.frozen().n_frozen(), 0);
    EXPECT_TRUE(jobs.name("s", kv.frozen()).is_ok());  // the job is gone
  }
}

}  // namespace
}  // namespace agentkv
