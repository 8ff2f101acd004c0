// Paged attention against contiguous attention computed in double from the
// definition: out = softmax(q K^T * scale over KV positions 0..pos) V, or
// over pos-W+1..pos with a sliding window W.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/backend.h"
#include "test_helpers.h"

namespace agentkv {
namespace {

using test::all_close;
using test::random_vec;

struct SeqSpec {
  int32_t kv_len;             // KV positions 0..kv_len-1 are written
  std::vector<int32_t> rows;  // query positions (each < kv_len)
};

struct Case {
  std::string name;
  int32_t n_heads, kv_heads, head_dim, block_size;
  std::vector<SeqSpec> seqs;
  int32_t window = 0;
};

// Builds the paged cache with blocks of each sequence at shuffled ids, runs the
// backend, and compares with contiguous double-precision attention.
void check_case(const Case& c, int n_threads, std::mt19937& rng, std::vector<float>* out_copy = nullptr) {
  SCOPED_TRACE(c.name + " block_size=" + std::to_string(c.block_size) +
               " threads=" + std::to_string(n_threads));
  auto be = backend_cpu_init({.n_threads = n_threads});
  const int32_t D = c.head_dim, width = c.kv_heads * D, bs = c.block_size;
  const float scale = 1.0f / std::sqrt(float(D));

  // Contiguous K/V per sequence: [kv_len, kv_heads, D].
  std::vector<std::vector<float>> ks, vs;
  int32_t total_blocks = 0;
  for (const auto& s : c.seqs) {
    ks.push_back(random_vec(rng, size_t(s.kv_len) * width, -2.0f, 2.0f));
    vs.push_back(random_vec(rng, size_t(s.kv_len) * width));
    total_blocks += (s.kv_len + bs - 1) / bs;
  }
  // Physical block ids: a random permutation of a pool with spare blocks, so
  // no sequence's blocks are contiguous or in order.
  const int32_t pool_blocks = total_blocks + 3;
  std::vector<int32_t> perm(pool_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  const int64_t stride = int64_t(bs) * width + 3;  // blocks need not be packed
  std::vector<float> kpool(stride * pool_blocks, NAN), vpool(stride * pool_blocks, NAN);

  std::vector<int32_t> row_indptr = {0}, row_pos, block_indptr = {0}, block_ids;
  for (size_t si = 0; si < c.seqs.size(); ++si) {
    const auto& s = c.seqs[si];
    int32_t nb = (s.kv_len + bs - 1) / bs;
    for (int32_t b = 0; b < nb; ++b) block_ids.push_back(perm[block_ids.size()]);
    for (int32_t j = 0; j < s.kv_len; ++j) {
      int64_t off = int64_t(block_ids[block_indptr.back() + j / bs]) * stride + int64_t(j % bs) * width;
      std::copy_n(&ks[si][size_t(j) * width], width, &kpool[off]);
      std::copy_n(&vs[si][size_t(j) * width], width, &vpool[off]);
    }
    block_indptr.push_back(int32_t(block_ids.size()));
    row_pos.insert(row_pos.end(), s.rows.begin(), s.rows.end());
    row_indptr.push_back(int32_t(row_pos.size()));
  }
  const int32_t n_rows = int32_t(row_pos.size());
  auto q = random_vec(rng, size_t(n_rows) * c.n_heads * D, -2.0f, 2.0f);

  std::vector<double> want(q.size());
  const int32_t group = c.n_heads / c.kv_heads;
  for (size_t si = 0; si < c.seqs.size(); ++si)
    for (int32_t r = row_indptr[si]; r < row_indptr[si + 1]; ++r)
      for (int32_t h = 0; h < c.n_heads; ++h) {
        const int32_t g = h / group, p = row_pos[r];
        const int32_t lo = c.window > 0 ? std::max(0, p - c.window + 1) : 0;
        const float* qr = &q[(size_t(r) * c.n_heads + h) * D];
        std::vector<double> sc(p + 1, 0.0);
        double mx = -INFINITY;
        for (int32_t j = lo; j <= p; ++j) {
          double dot = 0;
          for (int32_t d = 0; d < D; ++d) dot += double(qr[d]) * ks[si][size_t(j) * width + g * D + d];
          sc[j] = dot * scale;
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (int32_t j = lo; j <= p; ++j) sum += (sc[j] = std::exp(sc[j] - mx));
        for (int32_t d = 0; d < D; ++d) {
          double o = 0;
          for (int32_t j = lo; j <= p; ++j) o += sc[j] * vs[si][size_t(j) * width + g * D + d];
          want[(size_t(r) * c.n_heads + h) * D + d] = o / sum;
        }
      }

  AttentionPlan plan{int32_t(c.seqs.size()), row_indptr.data(), row_pos.data(), block_indptr.data(),
                     block_ids.data()};
  plan.window = c.window;
  KvLayerView kv{kpool.data(), vpool.data(), stride, bs, c.kv_heads, D};
  std::vector<float> out(q.size(), NAN);
  be->attention(plan, q.data(), c.n_heads, kv, scale, out.data());
  EXPECT_TRUE(all_close(out, want, 1e-5));
  if (out_copy) *out_copy = out;
}

std::vector<int32_t> iota_rows(int32_t from, int32_t to) {
  std::vector<int32_t> v(to - from);
  std::iota(v.begin(), v.end(), from);
  return v;
}

// Heads (n_heads, kv_heads) covering GQA ratio 3 (SmolLM2: 9/3), ratio 1
// (multi-head) and a single kv head for every query head (ratio = n_heads).
const std::pair<int32_t, int32_t> kHeads[] = {{9, 3}, {4, 4}, {6, 1}};

class AttentionTest : public ::testing::TestWithParam<std::tuple<int32_t, int>> {
 protected:
  int32_t block_size() const { return std::get<0>(GetParam()); }
  int threads() const { return std::get<1>(GetParam()); }
  std::mt19937 rng_{1234};
};

// A whole prompt (prefill) whose KV ends exactly around a block boundary.
TEST_P(AttentionTest, PrefillAtBlockBoundaries) {
  const int32_t bs = block_size();
  for (auto [h, kvh] : kHeads)
    for (int32_t len : {bs - 1, bs, bs + 1, 2 * bs + 1}) {
      if (len < 1) continue;
      check_case(
          {"prefill len " + std::to_string(len) + " heads " + std::to_string(h) + "/" + std::to_string(kvh),
           h,
           kvh,
           64,
           bs,
           {{len, iota_rows(0, len)}}},
          threads(), rng_);
    }
}

// One decode row per sequence, sequences of different lengths in one call.
TEST_P(AttentionTest, DecodeRowsOfSeveralSequences) {
  const int32_t bs = block_size();
  for (auto [h, kvh] : kHeads) {
    check_case({"single decode row", h, kvh, 64, bs, {{bs + 1, {bs}}}}, threads(), rng_);
    std::vector<SeqSpec> seqs;
    for (int32_t len : {1, bs - 1, bs, bs + 1, 3 * bs + 5, 70})
      if (len >= 1) seqs.push_back({len, {len - 1}});
    check_case({"decode batch", h, kvh, 64, bs, seqs}, threads(), rng_);
  }
}

// Rows whose positions are neither contiguous nor ordered, and do not reach
// the end of the written KV (recomputation of selected tokens, chunked prefill
// after a prefix hit), mixed with a plain chunk of another sequence.
TEST_P(AttentionTest, ScatteredRowPositions) {
  const int32_t bs = block_size();
  for (auto [h, kvh] : kHeads) {
    check_case({"scattered",
                h,
                kvh,
                64,
                bs,
                {{90, {3, 89, 17, 0, 64, 63, 31, 32, 33, 45}}, {40, iota_rows(25, 40)}, {5, {4, 2}}}},
               threads(), rng_);
  }
}

// Longer prefill: many key tiles and many row tiles per sequence, rows split
// into chunks like a chunked prefill after earlier chunks.
TEST_P(AttentionTest, LongChunkedPrefill) {
  const int32_t bs = block_size();
  check_case({"chunked prefill", 9, 3, 64, bs, {{300, iota_rows(200, 300)}, {77, iota_rows(0, 77)}}},
             threads(), rng_);
}

// Rows that reach past the first chunk of keys (512 positions): their keys
// are split into chunks whose partials are merged. Decode rows on each side
// of the chunk edges, and prefill rows across them.
TEST_P(AttentionTest, RowsPastOneKeyChunk) {
  const int32_t bs = block_size();
  check_case({"decode across chunks", 9, 3, 64, bs, {{1100, {511, 512, 1023, 1024, 1099}}, {600, {599}}}},
             threads(), rng_);
  check_case({"prefill across chunks", 9, 3, 64, bs, {{1100, iota_rows(490, 530)}, {1040, iota_rows(1020, 1040)}}},
             threads(), rng_);
}

// Head sizes that are not a multiple of the vector widths (tails), and a
// larger one.
TEST_P(AttentionTest, OtherHeadDims) {
  const int32_t bs = block_size();
  for (int32_t D : {8, 40, 7, 128})
    check_case({"head_dim " + std::to_string(D), 6, 2, D, bs, {{bs + 3, iota_rows(0, bs + 3)}, {9, {8}}}},
               threads(), rng_);
}

// Several rows of one sequence at the same position: the ICaRus paired
// decode step (encoder and decoder query at p over the same base K/V, App. B
// Alg. 3), pairs along a chunk, and more equal rows than one work item holds.
TEST_P(AttentionTest, DuplicatedPositions) {
  const int32_t bs = block_size();
  for (auto [h, kvh] : kHeads) {
    check_case({"paired decode", h, kvh, 64, bs, {{bs + 5, {bs + 4, bs + 4}}, {70, {69, 69}}, {1, {0, 0}}}},
               threads(), rng_);
    check_case({"pairs in a chunk", h, kvh, 64, bs, {{40, {30, 30, 31, 31, 32, 32, 39, 39}}}}, threads(), rng_);
    check_case({"many equal rows", h, kvh, 64, bs, {{50, std::vector<int32_t>(40, 49)}, {9, {3, 3, 8, 8}}}},
               threads(), rng_);
  }
}

// Sliding windows (Gemma 3's local layers, 512 there) shorter than a key tile,
// than a chunk, and longer than one: rows whose windows start mid-tile,
// mid-chunk and at 0, decode rows past several chunks (whose first chunks no
// row sees) and prefill rows across chunk edges, GQA 4/1 as Gemma 3 270M.
TEST_P(AttentionTest, SlidingWindow) {
  const int32_t bs = block_size();
  for (int32_t w : {1, 5, 32, 100, 512, 700}) {
    const std::string n = " window " + std::to_string(w);
    Case d{"decode" + n, 4, 1, 64, bs, {{1700, {1699, 1024, 600, 511, 40, 0}}, {90, {89}}, {3, {2}}}};
    d.window = w;
    check_case(d, threads(), rng_);
    Case p{"prefill" + n, 9, 3, 64, bs, {{1100, iota_rows(490, 530)}, {300, iota_rows(200, 300)}}};
    p.window = w;
    check_case(p, threads(), rng_);
  }
}

// Block sizes 7 and 48 divide neither a key tile (32) nor a key chunk (512):
// tiles and chunks start mid-block, where the kernel walks its keys' (block,
// slot) across block edges.
INSTANTIATE_TEST_SUITE_P(BlockSizesThreads, AttentionTest,
                         ::testing::Combine(::testing::Values(1, 7, 16, 32, 48), ::testing::Values(1, 2)));

// The work split differs with the thread count; every output must not.
TEST(Attention, OneAndTwoThreadsBitwiseEqual) {
  Case c{"threads", 9, 3, 64, 16, {{150, iota_rows(0, 150)}, {33, {32}}, {20, {0, 19, 7}}, {1500, {1499, 700}}}};
  std::vector<float> out1, out2;
  std::mt19937 rng1(99), rng2(99);
  check_case(c, 1, rng1, &out1);
  check_case(c, 2, rng2, &out2);
  EXPECT_EQ(out1, out2);
}

// Under a sliding window a row's output does not depend on the rows it is
// batched with (whose windows start earlier or later and move the item's
// first tile and chunk): bit for bit the same as the row alone.
TEST(Attention, SlidingWindowRowsBitwiseAloneOrBatched) {
  std::mt19937 rng(7);
  const int32_t H = 4, KVH = 1, D = 64, bs = 16, L = 1400, W = 512;
  auto k = test::random_vec(rng, size_t(L) * KVH * D, -2.0f, 2.0f);
  auto v = test::random_vec(rng, size_t(L) * KVH * D);
  std::vector<int32_t> blocks((L + bs - 1) / bs);
  std::iota(blocks.begin(), blocks.end(), 0);
  KvLayerView kv{k.data(), v.data(), int64_t(bs) * KVH * D, bs, KVH, D};
  const std::vector<int32_t> pos = {3, 300, 520, 700, 1023, 1399};
  auto q = test::random_vec(rng, pos.size() * H * D, -2.0f, 2.0f);
  auto run = [&](const std::vector<int32_t>& which, int threads) {
    auto be = backend_cpu_init({.n_threads = threads});
    std::vector<int32_t> rp, ri = {0, int32_t(which.size())}, bi = {0, int32_t(blocks.size())};
    std::vector<float> qs;
    for (int32_t i : which) {
      rp.push_back(pos[i]);
      qs.insert(qs.end(), q.begin() + size_t(i) * H * D, q.begin() + size_t(i + 1) * H * D);
    }
    AttentionPlan plan{1, ri.data(), rp.data(), bi.data(), blocks.data()};
    plan.window = W;
    std::vector<float> out(qs.size());
    be->attention(plan, qs.data(), H, kv, 0.125f, out.data());
    return out;
  };
  const std::vector<int32_t> all = {0, 1, 2, 3, 4, 5};
  const auto batched = run(all, 2);
  for (int32_t i : all) {
    const auto alone = run({i}, 1);
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), batched.begin() + size_t(i) * H * D))
        << "row at position " << pos[i];
  }
}

// Large score differences: without max subtraction exp() overflows.
TEST(Attention, NumericallyStableForLargeScores) {
  auto be = backend_cpu_init({.n_threads = 1});
  const int32_t D = 4;
  std::vector<float> k = {100, 0, 0, 0, -100, 0, 0, 0, 50, 0, 0, 0};
  std::vector<float> v = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  std::vector<float> q = {10, 0, 0, 0};
  std::vector<int32_t> row_indptr = {0, 1}, row_pos = {2}, block_indptr = {0, 1}, block_ids = {0};
  AttentionPlan plan{1, row_indptr.data(), row_pos.data(), block_indptr.data(), block_ids.data()};
  KvLayerView kv{k.data(), v.data(), 3 * D, 4, 1, D};
  std::vector<float> out(D);
  be->attention(plan, q.data(), 1, kv, 1.0f, out.data());
  // Scores 1000, -1000, 500: all weight on key 0 (e^-500 vanishes).
  for (int d = 0; d < D; ++d) EXPECT_FLOAT_EQ(out[d], v[d]);
}

}  // namespace
}  // namespace agentkv
