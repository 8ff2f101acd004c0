// Grouped LoRA against the definition in double precision:
//   y[r] += scale · (x[r] · A^T) · B^T for every listed row r, other rows untouched.
#include <gtest/gtest.h>

#include <numeric>

#include "backend/backend.h"
#include "test_helpers.h"

namespace agentkv {
namespace {

using test::all_close;
using test::random_vec;

struct LoraCase {
  int64_t n_total;            // rows of x and y (a whole Step)
  int64_t k, n;               // in and out features
  int32_t rank;
  std::vector<int32_t> rows;  // the adapter's rows
};

void check_lora(const LoraCase& c, int threads, std::mt19937& rng) {
  SCOPED_TRACE("rows=" + std::to_string(c.rows.size()) + " of " + std::to_string(c.n_total) +
               " k=" + std::to_string(c.k) + " n=" + std::to_string(c.n) + " rank=" + std::to_string(c.rank) +
               " threads=" + std::to_string(threads));
  auto be = backend_cpu_init({.n_threads = threads});
  auto x = random_vec(rng, size_t(c.n_total * c.k));            // (n_total, k)
  auto a = random_vec(rng, size_t(c.rank * c.k), -0.2f, 0.2f);  // (rank, k)
  auto b = random_vec(rng, size_t(c.n * c.rank), -0.3f, 0.3f);  // (n, rank)
  auto y = random_vec(rng, size_t(c.n_total * c.n));            // (n_total, n) base outputs
  const float scale = 2.0f / float(c.rank);

  std::vector<double> want(y.begin(), y.end());
  for (int32_t r : c.rows) {
    std::vector<double> t(c.rank, 0.0);
    for (int32_t q = 0; q < c.rank; ++q)
      for (int64_t i = 0; i < c.k; ++i) t[q] += double(x[r * c.k + i]) * a[q * c.k + i];
    for (int64_t j = 0; j < c.n; ++j) {
      double d = 0;
      for (int32_t q = 0; q < c.rank; ++q) d += t[q] * b[j * c.rank + q];
      want[r * c.n + j] += double(scale) * d;
    }
  }
  std::vector<float> got = y;
  be->lora(x.data(), c.k, LoraView{a.data(), b.data(), c.rank, scale}, c.rows.data(),
           int64_t(c.rows.size()), got.data(), c.n);
  EXPECT_TRUE(all_close(got, want, 1e-5));
  // Rows outside the subset are not touched at all.
  std::vector<bool> listed(c.n_total, false);
  for (int32_t r : c.rows) listed[r] = true;
  for (int64_t r = 0; r < c.n_total; ++r) {
    if (listed[r]) continue;
    for (int64_t j = 0; j < c.n; ++j) ASSERT_EQ(got[r * c.n + j], y[r * c.n + j]) << "row " << r;
  }
}

std::vector<int32_t> all_rows(int32_t n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

class LoraTest : public ::testing::TestWithParam<std::tuple<int32_t, int>> {
 protected:
  int32_t rank() const { return std::get<0>(GetParam()); }
  int threads() const { return std::get<1>(GetParam()); }
  std::mt19937 rng_{4321};
};

// Decode-sized calls (the GEMV path): one row, an ICaRus pair's decoder row,
// a few scattered rows, every row of a small step.
TEST_P(LoraTest, FewRows) {
  for (auto [k, n] : std::vector<std::pair<int64_t, int64_t>>{{37, 53}, {64, 96}, {576, 1536}, {1536, 576}, {9, 3}}) {
    check_lora({1, k, n, rank(), {0}}, threads(), rng_);
    check_lora({2, k, n, rank(), {1}}, threads(), rng_);
    check_lora({7, k, n, rank(), {6, 0, 3}}, threads(), rng_);
    check_lora({4, k, n, rank(), all_rows(4)}, threads(), rng_);
  }
}

// Prefill-sized calls (gather + GEMM): contiguous chunks, in the middle of
// the step too, and non-contiguous unordered subsets.
TEST_P(LoraTest, ManyRows) {
  for (auto [k, n] : std::vector<std::pair<int64_t, int64_t>>{{37, 53}, {576, 192}}) {
    check_lora({40, k, n, rank(), all_rows(40)}, threads(), rng_);
    std::vector<int32_t> mid(17);
    std::iota(mid.begin(), mid.end(), 11);
    check_lora({40, k, n, rank(), mid}, threads(), rng_);
    check_lora({40, k, n, rank(), {39, 2, 5, 7, 11, 13, 30, 31, 0}}, threads(), rng_);
  }
}

TEST_P(LoraTest, NoRowsIsANoOp) { check_lora({5, 37, 53, rank(), {}}, threads(), rng_); }

INSTANTIATE_TEST_SUITE_P(RanksThreads, LoraTest, ::testing::Combine(::testing::Values(1, 8, 64), ::testing::Values(1, 2)));

// Rank 0 (a module without an adapter) and empty dimensions leave y alone.
TEST(Lora, DegenerateShapes) {
  auto be = backend_cpu_init({.n_threads = 2});
  std::vector<float> x(8, 1.0f), y(8, 3.0f), a(8, 1.0f), b(8, 1.0f);
  const int32_t row = 0;
  be->lora(x.data(), 4, LoraView{a.data(), b.data(), 0, 1.0f}, &row, 1, y.data(), 4);
  be->lora(x.data(), 0, LoraView{a.data(), b.data(), 2, 1.0f}, &row, 1, y.data(), 4);
  be->lora(x.data(), 4, LoraView{a.data(), b.data(), 2, 1.0f}, &row, 1, y.data(), 0);
  EXPECT_EQ(y, std::vector<float>(8, 3.0f));
}

}  // namespace
}  // namespace agentkv

namespace agentkv {
namespace {

// lora_down, the LR cache's rows (LRAgent): t[i] = x[rows[i]] · A^T,
// unscaled, against the definition; and a row's t does not depend on how
// many rows share the call (it is written to a cache others read).
TEST(LoraDown, MatchesDefinitionAndIsRowCountInvariant) {
  std::mt19937 rng(21);
  for (int threads : {1, 2}) {
    auto be = backend_cpu_init({.n_threads = threads});
    for (int32_t rank : {1, 8, 64}) {
      const int64_t n_total = 40, k = 576;
      auto x = test::random_vec(rng, size_t(n_total * k));
      auto a = test::random_vec(rng, size_t(rank * k), -0.2f, 0.2f);
      for (const std::vector<int32_t>& rows :
           {std::vector<int32_t>{7}, std::vector<int32_t>{3, 9, 1}, std::vector<int32_t>{0, 5, 6, 7, 8, 20, 39},
            [] {
              std::vector<int32_t> v(32);
              std::iota(v.begin(), v.end(), 4);
              return v;
            }()}) {
        SCOPED_TRACE("threads=" + std::to_string(threads) + " rank=" + std::to_string(rank) +
                     " rows=" + std::to_string(rows.size()));
        std::vector<double> want(rows.size() * rank);
        for (size_t i = 0; i < rows.size(); ++i)
          for (int32_t q = 0; q < rank; ++q)
            for (int64_t c = 0; c < k; ++c) want[i * rank + q] += double(x[rows[i] * k + c]) * a[q * k + c];
        std::vector<float> t(rows.size() * rank, NAN);
        be->lora_down(x.data(), k, a.data(), rank, rows.data(), int64_t(rows.size()), t.data());
        EXPECT_TRUE(test::all_close(t, want, 1e-5));
        for (size_t i = 0; i < rows.size(); ++i) {
          std::vector<float> alone(rank, NAN);
          be->lora_down(x.data(), k, a.data(), rank, &rows[i], 1, alone.data());
          for (int32_t q = 0; q < rank; ++q) ASSERT_EQ(alone[q], t[i * rank + q]) << "row " << rows[i];
        }
      }
    }
  }
}

}  // namespace
}  // namespace agentkv
