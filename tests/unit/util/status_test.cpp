#include "util/status.h"

#include <gtest/gtest.h>

#include "util/hash.h"
#include "util/thread_pool.h"

#include <atomic>
#include <vector>

namespace agentkv {
namespace {

Result<int> parse_positive(int x) {
  if (x <= 0) return make_error(ErrorCode::kInvalidArgument, "not positive: ", x);
  return x;
}

Status use_twice(int x, int* out) {
  AKV_ASSIGN_OR_RETURN(int v, parse_positive(x));
  *out = 2 * v;
  return Status::ok();
}

TEST(Status, PropagatesErrorsWithMessages) {
  int out = 0;
  EXPECT_TRUE(use_twice(3, &out).is_ok());
  EXPECT_EQ(out, 6);
  Status st = use_twice(-2, &out);
  EXPECT_FALSE(st.is_ok());
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "not positive: -2");
  EXPECT_EQ(st.with_context("f.gguf").message(), "f.gguf: not positive: -2");
}

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 7}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 5, 100, 1001}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << threads << " " << n << " " << i;
    }
  }
}

TEST(ThreadPool, ManyBackToBackLoopsLoseNoWork) {
  // Decode issues hundreds of tiny loops per token; workers spin between them.
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int rep = 0; rep < 20000; ++rep) {
    pool.parallel_for(3, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) sum += i + 1;
    });
  }
  EXPECT_EQ(sum.load(), 20000 * 6);
}

TEST(Hash, DependsOnEveryByteAndSeed) {
  std::vector<uint8_t> a = {1, 2, 3, 4}, b = {1, 2, 3, 5};
  EXPECT_EQ(hash_bytes(a), hash_bytes(a));
  EXPECT_NE(hash_bytes(a), hash_bytes(b));
  EXPECT_NE(hash_bytes(a, 1), hash_bytes(a, 2));
}

}  // namespace
}  // namespace agentkv
