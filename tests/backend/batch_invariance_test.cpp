// Batch invariance (docs/design.md §4): a row's output from every op the runner
// calls is bitwise the same whatever the other rows of the call, the row
// count and the thread count. Each case computes rows alone (one row per call,
// one thread) and then in calls of other sizes and thread counts, and demands
// equality, not closeness. Accuracy against plain references is the other
// backend tests' job.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "format/ggml_type.h"
#include "quant_helpers.h"
#include "test_helpers.h"

namespace agentkv {
namespace {

using test::random_matrix;
using test::random_vec;

const int64_t kRowCounts[] = {1, 2, 3, 4, 5, 7, 8, 13, 37};

// rows(x[0..m)) computed by `run` equals, row by row, each row run alone.
template <class Run>
void expect_rows_invariant(const std::vector<float>& x, int64_t k, int64_t n, Run run, const std::string& what) {
  const int64_t total = int64_t(x.size()) / k;
  auto be1 = backend_cpu_init({.n_threads = 1});
  auto be2 = backend_cpu_init({.n_threads = 2});
  std::vector<float> alone(total * n);
  for (int64_t i = 0; i < total; ++i) run(*be1, x.data() + i * k, alone.data() + i * n, 1);
  for (backend_i* be : {be1.get(), be2.get()}) {
    for (int64_t m : kRowCounts) {
      if (m > total) continue;
      std::vector<float> y(m * n);
      run(*be, x.data(), y.data(), m);
      EXPECT_TRUE(std::equal(y.begin(), y.end(), alone.begin()))
          << what << ": m=" << m << " threads=" << be->n_threads() << " differs from the rows alone";
    }
  }
}

TEST(BatchInvariance, MatmulF32) {
  std::mt19937 rng(7);
  // k = 7 and 100 exercise the zero-padded last chunk; n = 37 the edge tiles.
  for (int64_t k : {7, 64, 100, 576}) {
    const int64_t n = 37;
    const auto w = random_vec(rng, n * k);
    const auto x = random_vec(rng, 37 * k);
    for (bool acc : {false, true}) {
      expect_rows_invariant(
          x, k, n,
          [&](backend_i& be, const float* xr, float* y, int64_t m) {
            for (int64_t i = 0; i < m * n; ++i) y[i] = acc ? 0.5f + float(i % n) : 0.0f;
            be.matmul(xr, w.data(), y, m, k, n, acc);
          },
          "f32 k=" + std::to_string(k) + " acc=" + std::to_string(acc));
    }
  }
}

TEST(BatchInvariance, MatmulQuantEveryType) {
  std::mt19937 rng(11);
  for (GgmlType t : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                     GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    const uint32_t id = static_cast<uint32_t>(t);
    const auto tr = *ggml_type_traits(id);
    // n = 29: odd, not a multiple of any tile or panel width.
    const int64_t k = (tr.block_elems == 32 ? 18 : 3) * tr.block_elems, n = 29;
    const int64_t row_bytes = k / tr.block_elems * tr.block_bytes;
    const auto w = random_matrix(rng, t, n, k, row_bytes);
    const QuantMatrix qm{id, w.data(), row_bytes, n, k};
    const auto x = random_vec(rng, 37 * k);
    expect_rows_invariant(
        x, k, n, [&](backend_i& be, const float* xr, float* y, int64_t m) { be.matmul_quant(xr, qm, y, m); },
        std::string(tr.name));
  }
}

TEST(BatchInvariance, LoraRowsAloneOrGroupedInAnyOrder) {
  std::mt19937 rng(3);
  const int64_t k = 72, n = 40, rank = 8, total = 12;
  const auto a = random_vec(rng, rank * k), b = random_vec(rng, n * rank);
  const LoraView lv{a.data(), b.data(), int32_t(rank), 0.75f};
  const auto x = random_vec(rng, total * k);
  const auto y0 = random_vec(rng, total * n);
  auto be1 = backend_cpu_init({.n_threads = 1});
  auto be2 = backend_cpu_init({.n_threads = 2});
  std::vector<float> alone = y0;
  for (int32_t r = 0; r < total; ++r) be1->lora(x.data(), k, lv, &r, 1, alone.data(), n);
  const std::vector<std::vector<int32_t>> groups = {
      {0, 1, 2},                                  // few rows
      {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11},     // contiguous, many rows
      {11, 3, 7, 0, 5, 9, 1, 10, 2, 8, 4, 6}};    // gathered, many rows
  for (backend_i* be : {be1.get(), be2.get()}) {
    for (const auto& g : groups) {
      std::vector<float> y = y0;
      be->lora(x.data(), k, lv, g.data(), int64_t(g.size()), y.data(), n);
      for (int32_t r : g)
        EXPECT_TRUE(std::equal(y.begin() + r * n, y.begin() + (r + 1) * n, alone.begin() + r * n))
            << "row " << r << " in a group of " << g.size() << ", threads " << be->n_threads();
    }
  }
}

class AttentionInvariance : public ::testing::TestWithParam<int32_t> {};

// len 1100: rows past the first 512 keys are reduced in key chunks and merged.
TEST_P(AttentionInvariance, RowAloneOrInChunks) {
  // SmolLM2's GQA (9 query heads on 3 kv heads): a work item holds rows x 3
  // query vectors, odd or even with the chunking.
  const int32_t n_heads = 9, kv_heads = 3, D = 64, bs = 16, len = GetParam();
  const int64_t width = int64_t(kv_heads) * D;
  std::mt19937 rng(5);
  const int32_t n_blocks = (len + bs - 1) / bs;
  std::vector<int32_t> block_ids(n_blocks);
  for (int32_t i = 0; i < n_blocks; ++i) block_ids[i] = n_blocks - 1 - i;  // scattered on purpose
  auto kp = random_vec(rng, size_t(n_blocks) * bs * width), vp = random_vec(rng, size_t(n_blocks) * bs * width);
  const KvLayerView kv{kp.data(), vp.data(), int64_t(bs) * width, bs, kv_heads, D};
  const auto q = random_vec(rng, size_t(len) * n_heads * D, -2.0f, 2.0f);
  const int64_t qrow = int64_t(n_heads) * D;
  const float scale = 0.125f;
  auto run = [&](backend_i& be, int32_t p0, int32_t p1, float* out) {
    std::vector<int32_t> pos(p1 - p0);
    for (int32_t p = p0; p < p1; ++p) pos[p - p0] = p;
    const int32_t row_indptr[2] = {0, p1 - p0}, block_indptr[2] = {0, n_blocks};
    const AttentionPlan plan{1, row_indptr, pos.data(), block_indptr, block_ids.data()};
    be.attention(plan, q.data() + p0 * qrow, n_heads, kv, scale, out);
  };
  auto be1 = backend_cpu_init({.n_threads = 1});
  auto be2 = backend_cpu_init({.n_threads = 2});
  std::vector<float> alone(size_t(len) * qrow);
  for (int32_t p = 0; p < len; ++p) run(*be1, p, p + 1, alone.data() + p * qrow);
  for (backend_i* be : {be1.get(), be2.get()}) {
    for (int32_t chunk : {2, 3, 7, 11, 32, 70}) {
      std::vector<float> out(alone.size());
      for (int32_t p0 = 0; p0 < len; p0 += chunk) run(*be, p0, std::min(len, p0 + chunk), out.data() + p0 * qrow);
      EXPECT_EQ(out, alone) << "chunks of " << chunk << ", threads " << be->n_threads();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Lengths, AttentionInvariance, ::testing::Values(70, 1100));

TEST(BatchInvariance, SwigluWhereverASliceEnds) {
  std::mt19937 rng(9);
  const int64_t n = 1536 * 3 + 5;
  const auto g = random_vec(rng, n, -6.0f, 6.0f), u = random_vec(rng, n);
  auto be1 = backend_cpu_init({.n_threads = 1});
  auto be2 = backend_cpu_init({.n_threads = 2});
  std::vector<float> alone(n), whole1(n), whole2(n);
  for (int64_t i = 0; i < n; ++i) be1->swiglu(&g[i], &u[i], &alone[i], 1);
  be1->swiglu(g.data(), u.data(), whole1.data(), n);
  be2->swiglu(g.data(), u.data(), whole2.data(), n);
  EXPECT_EQ(whole1, alone);
  EXPECT_EQ(whole2, alone);
}

}  // namespace
}  // namespace agentkv
