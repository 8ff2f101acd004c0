// attention_colsum against column sums of causal softmax attention computed
// in double from the definition:
//   colsum[j] = sum_i sum_h softmax(q[i, h] K^T * scale over keys 0..q_pos[i])[j].
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "test_helpers.h"

namespace agentkv {
namespace {

using test::random_vec;
using test::worst_rel_error;

// Tolerances from the worst errors measured over this file's cases, q and K
// uniform in [-2, 2] unless said otherwise (threads 1 and 2 alike):
// - relative error against the double reference (test::worst_rel_error):
//   <= 3.0e-7 for the ColsumTest cases, 1.7e-6 for the 130 queries x 16
//   heads of BatchesAndThreadsBitwiseEqual (float sums over 2080 rows);
constexpr double kColsumTol = 5e-6;
// - the same with q and K in [-20, 20] (LargeScores): 6.4e-6. A float score
//   s is off by ~|s| * 2^-24 and exp turns that into a relative error, so
//   scores in the hundreds cost a factor ~20;
constexpr double kColsumLargeScoresTol = 2e-5;
// - |sum_j colsum[j] / (n_q * n_heads) - 1|: 7.0e-8.
constexpr double kMassTol = 3e-7;

struct ColsumCase {
  std::string name;
  int32_t n_heads, kv_heads, head_dim, block_size, n_keys;
  std::vector<int32_t> q_pos;
  float range = 2.0f;  // q and K uniform in [-range, range]
  double tol = kColsumTol;
  int32_t window = 0;  // sliding window: a query at p sees keys p-window+1..p
};

struct ColsumResult {
  std::vector<float> got;
  double err = 0;   // worst relative error against the reference
  double mass = 0;  // |sum of colsum / (n_q * n_heads) - 1|
};

// Pages K (contiguous [n_keys, kv_heads, head_dim]) into blocks at shuffled
// ids with NaN in every unwritten slot, runs the backend and compares with the
// double-precision reference.
ColsumResult check_case(const ColsumCase& c, int n_threads, std::mt19937& rng) {
  SCOPED_TRACE(c.name + " block_size=" + std::to_string(c.block_size) +
               " threads=" + std::to_string(n_threads));
  auto be = backend_cpu_init({.n_threads = n_threads});
  const int32_t D = c.head_dim, width = c.kv_heads * D, bs = c.block_size;
  const float scale = 1.0f / std::sqrt(float(D));
  const auto k = random_vec(rng, size_t(c.n_keys) * width, -c.range, c.range);

  const int32_t n_blocks = (c.n_keys + bs - 1) / bs;
  std::vector<int32_t> blocks(n_blocks + 3);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  blocks.resize(n_blocks);
  const int64_t stride = int64_t(bs) * width + 3;  // blocks need not be packed
  std::vector<float> kpool(stride * (n_blocks + 3), NAN), vpool(kpool.size(), NAN);
  for (int32_t j = 0; j < c.n_keys; ++j)
    std::copy_n(&k[size_t(j) * width], width, &kpool[blocks[j / bs] * stride + int64_t(j % bs) * width]);

  const int64_t n_q = int64_t(c.q_pos.size());
  const auto q = random_vec(rng, size_t(n_q) * c.n_heads * D, -c.range, c.range);

  std::vector<double> want(c.n_keys, 0.0);
  const int32_t group = c.n_heads / c.kv_heads;
  for (int64_t i = 0; i < n_q; ++i)
    for (int32_t h = 0; h < c.n_heads; ++h) {
      const int32_t g = h / group, p = c.q_pos[i];
      const int32_t lo = c.window > 0 ? std::max(0, p - c.window + 1) : 0;
      const float* qr = &q[(size_t(i) * c.n_heads + h) * D];
      std::vector<double> s(p + 1, 0.0);
      double mx = -INFINITY;
      for (int32_t j = lo; j <= p; ++j) {
        double dot = 0;
        for (int32_t d = 0; d < D; ++d) dot += double(qr[d]) * k[size_t(j) * width + g * D + d];
        s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (int32_t j = lo; j <= p; ++j) sum += (s[j] = std::exp(s[j] - mx));
      for (int32_t j = lo; j <= p; ++j) want[j] += s[j] / sum;
    }

  KvLayerView kv{kpool.data(), vpool.data(), stride, bs, c.kv_heads, D};
  ColsumResult res;
  res.got.assign(c.n_keys, NAN);  // every entry must be written
  be->attention_colsum(q.data(), c.q_pos.data(), n_q, c.n_heads, blocks.data(), n_blocks, c.n_keys, kv, scale,
                       res.got.data(), c.window);
  res.err = worst_rel_error(res.got, want);
  EXPECT_LE(res.err, c.tol);
  const int32_t last = *std::max_element(c.q_pos.begin(), c.q_pos.end());
  for (int32_t j = last + 1; j < c.n_keys; ++j)
    EXPECT_EQ(res.got[j], 0.0f) << "key " << j << " after every query";
  // Each softmax row sums to 1, so the column sums add up to the row count.
  double total = 0;
  for (float x : res.got) total += x;
  res.mass = std::fabs(total / double(n_q * c.n_heads) - 1.0);
  EXPECT_LE(res.mass, kMassTol);
  return res;
}

std::vector<int32_t> iota_pos(int32_t from, int32_t to) {
  std::vector<int32_t> v(to - from);
  std::iota(v.begin(), v.end(), from);
  return v;
}

// (n_heads, kv_heads): GQA 3 (SmolLM2: 9/3), multi-head, one kv head.
const std::pair<int32_t, int32_t> kHeads[] = {{9, 3}, {4, 4}, {6, 1}};

class ColsumTest : public ::testing::TestWithParam<std::tuple<int32_t, int>> {
 protected:
  int32_t block_size() const { return std::get<0>(GetParam()); }
  int threads() const { return std::get<1>(GetParam()); }
  void run(const ColsumCase& c) {
    ColsumResult r = check_case(c, threads(), rng_);
    double& worst = c.tol == kColsumTol ? worst_err_ : worst_large_err_;
    worst = std::max(worst, r.err);
    worst_mass_ = std::max(worst_mass_, r.mass);
  }
  static void TearDownTestSuite() {
    std::printf(
        "[ measured ] attention_colsum worst relative error %.3g (tolerance %.3g), with large scores "
        "%.3g (tolerance %.3g), mass error %.3g (tolerance %.3g)\n",
        worst_err_, kColsumTol, worst_large_err_, kColsumLargeScoresTol, worst_mass_, kMassTol);
  }
  std::mt19937 rng_{4321};
  static inline double worst_err_ = 0, worst_large_err_ = 0, worst_mass_ = 0;
};

// One query (n_q = 1): at the last key, and in the middle with keys after it.
TEST_P(ColsumTest, OneQuery) {
  const int32_t bs = block_size();
  for (auto [h, kvh] : kHeads) {
    const std::string heads = " heads " + std::to_string(h) + "/" + std::to_string(kvh);
    run({"last key" + heads, h, kvh, 64, bs, 2 * bs + 3, {2 * bs + 2}});
    run({"middle" + heads, h, kvh, 64, bs, 3 * bs + 1, {bs + 1}});
    run({"first key" + heads, h, kvh, 64, bs, 5, {0}});
  }
}

// Sparse-Q: query rows at non-contiguous, unordered and repeated positions,
// over a key count that is not a multiple of the block size.
TEST_P(ColsumTest, ScatteredQueries) {
  const int32_t bs = block_size();
  for (auto [h, kvh] : kHeads) {
    const std::string heads = " heads " + std::to_string(h) + "/" + std::to_string(kvh);
    run({"scattered" + heads, h, kvh, 64, bs, 90, {3, 89, 17, 0, 64, 63, 31, 32, 45, 45}});
    run({"suffix" + heads, h, kvh, 64, bs, 2 * bs + 7, iota_pos(2 * bs, 2 * bs + 7)});
  }
}

// Head sizes off the vector width, and a larger one.
TEST_P(ColsumTest, OtherHeadDims) {
  const int32_t bs = block_size();
  for (int32_t D : {7, 8, 40, 128})
    run({"head_dim " + std::to_string(D), 6, 2, D, bs, bs + 9, {bs + 8, 2, 5}});
}

// Scores in the hundreds: exp() without the row maximum subtracted overflows.
TEST_P(ColsumTest, LargeScores) {
  ColsumCase c{"large scores", 4, 2, 64, block_size(), 50, {49, 10, 30}};
  c.range = 20.0f;
  c.tol = kColsumLargeScoresTol;
  run(c);
}

// A sliding window (Gemma 3's local layers): keys before a query's window get
// nothing from it; a window of 1 puts all its mass on its own key.
TEST_P(ColsumTest, SlidingWindow) {
  const int32_t bs = block_size();
  for (int32_t w : {1, 5, 40, 200}) {
    ColsumCase c{"window " + std::to_string(w), 4, 1, 64, bs, 90, {3, 89, 17, 0, 64, 63, 31, 45, 45}};
    c.window = w;
    run(c);
  }
}

INSTANTIATE_TEST_SUITE_P(BlockSizesThreads, ColsumTest,
                         ::testing::Combine(::testing::Values(1, 16, 32), ::testing::Values(1, 2)));

// Enough queries that the kernel takes them in two batches (its item rows are
// bounded by 2^22 floats: 128 queries here, 8 kv heads x 4096 keys), 1 and 2
// threads: each colsum entry is summed in one order, so bit for bit the same.
TEST(Colsum, BatchesAndThreadsBitwiseEqual) {
  std::vector<int32_t> pos(130);
  std::mt19937 pick(8);
  for (int32_t& p : pos) p = int32_t(pick() % 4096);
  pos[7] = 4095;
  ColsumCase c{"two batches", 16, 8, 16, 16, 4096, pos};
  std::mt19937 rng1(77), rng2(77);
  ColsumResult r1 = check_case(c, 1, rng1), r2 = check_case(c, 2, rng2);
  EXPECT_TRUE(r1.got == r2.got) << "1 and 2 threads differ";
  std::printf(
      "[ measured ] attention_colsum, 130 queries x 16 heads over 4096 keys: relative error %.3g, "
      "mass error %.3g\n",
      r1.err, r1.mass);
}

}  // namespace
}  // namespace agentkv
