#include <gtest/gtest.h>

#include "backend/backend.h"
#include "test_helpers.h"

namespace agentkv {
namespace {

using test::all_close;
using test::random_vec;

// y[i][j] = sum_l x[i][l] * w[j][l] (+ y0[i][j])
std::vector<double> ref_matmul(const std::vector<float>& x, const std::vector<float>& w,
                               const std::vector<float>& y0, int64_t m, int64_t k, int64_t n,
                               bool accumulate) {
  std::vector<double> y(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = accumulate ? y0[i * n + j] : 0.0;
      for (int64_t l = 0; l < k; ++l) s += double(x[i * k + l]) * w[j * k + l];
      y[i * n + j] = s;
    }
  return y;
}

struct Shape {
  int64_t m, k, n;
};

class MatmulTest : public ::testing::TestWithParam<int> {};

TEST_P(MatmulTest, MatchesReference) {
  auto be = backend_cpu_init({.n_threads = GetParam()});
  std::mt19937 rng(7);
  // Odd sizes exercise the tails of the GEMV (k % 8, n % 4) and of the
  // per-thread column slices (n % 16); the last rows are SmolLM2 shapes.
  const Shape shapes[] = {{1, 1, 1},      {1, 13, 37},    {2, 13, 37},    {3, 64, 5},
                          {1, 576, 192},  {16, 576, 192}, {17, 40, 33},   {1, 1536, 576},
                          {4, 576, 1536}, {5, 1536, 576}, {128, 576, 576}};
  for (const Shape& s : shapes) {
    for (bool accumulate : {false, true}) {
      auto x = random_vec(rng, s.m * s.k);
      auto w = random_vec(rng, s.n * s.k);
      auto y = random_vec(rng, s.m * s.n);
      auto want = ref_matmul(x, w, y, s.m, s.k, s.n, accumulate);
      be->matmul(x.data(), w.data(), y.data(), s.m, s.k, s.n, accumulate);
      EXPECT_TRUE(all_close(y, want, 1e-5))
          << "m=" << s.m << " k=" << s.k << " n=" << s.n << " acc=" << accumulate;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, MatmulTest, ::testing::Values(1, 2));

TEST(Matmul, ZeroInnerDimensionZeroesOrKeeps) {
  auto be = backend_cpu_init({.n_threads = 2});
  std::vector<float> y = {1, 2, 3, 4};
  be->matmul(nullptr, nullptr, y.data(), 2, 0, 2, /*accumulate=*/true);
  EXPECT_EQ(y, (std::vector<float>{1, 2, 3, 4}));
  be->matmul(nullptr, nullptr, y.data(), 2, 0, 2, /*accumulate=*/false);
  EXPECT_EQ(y, (std::vector<float>{0, 0, 0, 0}));
}

TEST(Matmul, OneAndTwoThreadsAgree) {
  auto be1 = backend_cpu_init({.n_threads = 1});
  auto be2 = backend_cpu_init({.n_threads = 2});
  std::mt19937 rng(3);
  for (int64_t m : {1, 16, 64}) {
    const int64_t k = 576, n = 1536;
    auto x = random_vec(rng, m * k), w = random_vec(rng, n * k);
    std::vector<float> y1(m * n), y2(m * n);
    be1->matmul(x.data(), w.data(), y1.data(), m, k, n);
    be2->matmul(x.data(), w.data(), y2.data(), m, k, n);
    std::vector<double> y1d(y1.begin(), y1.end());
    // Column slices may take different library kernels, so only rounding
    // differences are allowed, not bitwise equality.
    EXPECT_TRUE(all_close(y2, y1d, 1e-5)) << "m=" << m;
  }
}

}  // namespace
}  // namespace agentkv
