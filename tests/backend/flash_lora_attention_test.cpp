// Flash-LoRA-Attention (LRAgent Alg. 1, AttentionPlan::lr) against attention
// over the expanded V = V_base + scale · V_lr · B^T, computed in double from
// the definition, over paged K/V and a separately paged LR cache (its own
// shuffled block ids), with GQA, ranks 1, 8, 16 and 64, decode and prefill
// rows, and sequences without an LR part in the same call. The expand
// reference path is checked against the same reference.
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

struct Seq {
  int32_t kv_len;
  std::vector<int32_t> rows;  // query positions
  int32_t rank;               // 0: no LR part
};

struct Case {
  std::string name;
  int32_t n_heads, kv_heads, head_dim, block_size;
  std::vector<Seq> seqs;
};

std::vector<int32_t> iota_rows(int32_t from, int32_t to) {
  std::vector<int32_t> v(to - from);
  std::iota(v.begin(), v.end(), from);
  return v;
}

// A random permutation of [0, n): physical block ids in no order.
std::vector<int32_t> shuffled(int32_t n, std::mt19937& rng) {
  std::vector<int32_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  std::shuffle(p.begin(), p.end(), rng);
  return p;
}

struct Built {
  std::vector<float> kpool, vpool, lrpool, q;
  std::vector<std::vector<float>> bs;  // B per sequence
  std::vector<int32_t> row_indptr{0}, row_pos, block_indptr{0}, block_ids, lr_indptr{0}, lr_ids, ranks;
  std::vector<const float*> b_ptrs;
  std::vector<float> scales;
  std::vector<double> want;
  int64_t stride = 0, lr_stride = 0;
  int32_t lr_width = 0;
};

Built build(const Case& c, std::mt19937& rng) {
  Built b;
  const int32_t D = c.head_dim, width = c.kv_heads * D, bsz = c.block_size;
  for (const Seq& s : c.seqs) b.lr_width = std::max(b.lr_width, s.rank);
  b.lr_width = std::max(b.lr_width, 1) + 2;  // rows wider than the ranks, as the engine's pool
  std::vector<std::vector<float>> ks, vs, lrs;
  int32_t total = 0;
  for (const Seq& s : c.seqs) {
    ks.push_back(random_vec(rng, size_t(s.kv_len) * width, -2.0f, 2.0f));
    vs.push_back(random_vec(rng, size_t(s.kv_len) * width));
    lrs.push_back(random_vec(rng, size_t(s.kv_len) * b.lr_width));
    b.bs.push_back(random_vec(rng, size_t(width) * std::max(s.rank, 1), -0.5f, 0.5f));
    total += (s.kv_len + bsz - 1) / bsz;
  }
  const std::vector<int32_t> perm = shuffled(total + 3, rng), lr_perm = shuffled(total + 5, rng);
  b.stride = int64_t(bsz) * width + 3;
  b.lr_stride = int64_t(bsz) * b.lr_width + 1;
  b.kpool.assign(b.stride * (total + 3), NAN);
  b.vpool.assign(b.stride * (total + 3), NAN);
  b.lrpool.assign(b.lr_stride * (total + 5), NAN);
  for (size_t si = 0; si < c.seqs.size(); ++si) {
    const Seq& s = c.seqs[si];
    const int32_t nb = (s.kv_len + bsz - 1) / bsz;
    for (int32_t k = 0; k < nb; ++k) {
      b.block_ids.push_back(perm[b.block_ids.size()]);
      b.lr_ids.push_back(lr_perm[b.lr_ids.size()]);
    }
    for (int32_t j = 0; j < s.kv_len; ++j) {
      const int64_t off =
          int64_t(b.block_ids[b.block_indptr.back() + j / bsz]) * b.stride + int64_t(j % bsz) * width;
      std::copy_n(&ks[si][size_t(j) * width], width, &b.kpool[off]);
      std::copy_n(&vs[si][size_t(j) * width], width, &b.vpool[off]);
      const int64_t loff =
          int64_t(b.lr_ids[b.lr_indptr.back() + j / bsz]) * b.lr_stride + int64_t(j % bsz) * b.lr_width;
      std::copy_n(&lrs[si][size_t(j) * b.lr_width], b.lr_width, &b.lrpool[loff]);
    }
    b.block_indptr.push_back(int32_t(b.block_ids.size()));
    b.lr_indptr.push_back(int32_t(b.lr_ids.size()));
    b.row_pos.insert(b.row_pos.end(), s.rows.begin(), s.rows.end());
    b.row_indptr.push_back(int32_t(b.row_pos.size()));
    b.ranks.push_back(s.rank);
    b.scales.push_back(s.rank > 0 ? 16.0f / float(s.rank) : 0.0f);
    b.b_ptrs.push_back(s.rank > 0 ? b.bs[si].data() : nullptr);
  }
  const int32_t n_rows = int32_t(b.row_pos.size());
  b.q = random_vec(rng, size_t(n_rows) * c.n_heads * D, -2.0f, 2.0f);

  // Reference: softmax(q K^T * scale) over the expanded V, in double.
  const double scale = 1.0 / std::sqrt(double(D));
  const int32_t group = c.n_heads / c.kv_heads;
  b.want.assign(b.q.size(), 0.0);
  for (size_t si = 0; si < c.seqs.size(); ++si) {
    const Seq& s = c.seqs[si];
    std::vector<double> vexp(size_t(s.kv_len) * width);
    for (int32_t j = 0; j < s.kv_len; ++j)
      for (int32_t col = 0; col < width; ++col) {
        double t = 0;
        for (int32_t k = 0; k < s.rank; ++k)
          t += double(lrs[si][size_t(j) * b.lr_width + k]) * b.bs[si][size_t(col) * s.rank + k];
        vexp[size_t(j) * width + col] = vs[si][size_t(j) * width + col] + double(b.scales[si]) * t;
      }
    for (int32_t r = b.row_indptr[si]; r < b.row_indptr[si + 1]; ++r)
      for (int32_t h = 0; h < c.n_heads; ++h) {
        const int32_t g = h / group, p = b.row_pos[r];
        const float* qr = &b.q[(size_t(r) * c.n_heads + h) * D];
        std::vector<double> sc(p + 1);
        double mx = -INFINITY;
        for (int32_t j = 0; j <= p; ++j) {
          double dot = 0;
          for (int32_t d = 0; d < D; ++d) dot += double(qr[d]) * ks[si][size_t(j) * width + g * D + d];
          sc[j] = dot * scale;
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (double& x : sc) sum += (x = std::exp(x - mx));
        for (int32_t d = 0; d < D; ++d) {
          double o = 0;
          for (int32_t j = 0; j <= p; ++j) o += sc[j] * vexp[size_t(j) * width + g * D + d];
          b.want[(size_t(r) * c.n_heads + h) * D + d] = o / sum;
        }
      }
  }
  return b;
}

std::vector<float> run(const Case& c, Built& b, int n_threads, LrAttention::Path path) {
  auto be = backend_cpu_init({.n_threads = n_threads});
  LrAttention lr;
  lr.lr = b.lrpool.data();
  lr.block_stride = b.lr_stride;
  lr.width = b.lr_width;
  lr.block_indptr = b.lr_indptr.data();
  lr.block_ids = b.lr_ids.data();
  lr.b = b.b_ptrs.data();
  lr.rank = b.ranks.data();
  lr.scale = b.scales.data();
  lr.path = path;
  AttentionPlan plan{int32_t(c.seqs.size()), b.row_indptr.data(), b.row_pos.data(), b.block_indptr.data(),
                     b.block_ids.data()};
  plan.lr = &lr;
  KvLayerView kv{b.kpool.data(), b.vpool.data(), b.stride, c.block_size, c.kv_heads, c.head_dim};
  std::vector<float> out(b.q.size(), NAN);
  be->attention(plan, b.q.data(), c.n_heads, kv, 1.0f / std::sqrt(float(c.head_dim)), out.data());
  return out;
}

// The tolerance of attention_test.cpp (1e-5 relative), which the issue asks
// of Flash-LoRA-Attention: the extra accumulator adds r terms per output,
// far fewer than the kv_len terms of P·V, so it does not need more.
constexpr double kRtol = 1e-5;

void check(const Case& c, std::mt19937& rng) {
  Built b = build(c, rng);
  for (int threads : {1, 2}) {
    SCOPED_TRACE(c.name + " threads=" + std::to_string(threads));
    EXPECT_TRUE(all_close(run(c, b, threads, LrAttention::Path::kFused), b.want, kRtol)) << "flash-lora";
    EXPECT_TRUE(all_close(run(c, b, threads, LrAttention::Path::kExpand), b.want, kRtol)) << "expanded";
    EXPECT_TRUE(all_close(run(c, b, threads, LrAttention::Path::kAuto), b.want, kRtol)) << "auto";
  }
}

class FlashLoraAttention : public ::testing::TestWithParam<int32_t> {
 protected:
  std::mt19937 rng_{99};
};

TEST_P(FlashLoraAttention, DecodeRowsOverPagedCaches) {
  const int32_t r = GetParam();
  for (int32_t bs : {1, 16}) {
    check({"decode bs " + std::to_string(bs),
           9,
           3,
           64,
           bs,
           {{bs + 3, {bs + 2}, r}, {70, {69}, r}, {5, {4}, r}}},
          rng_);
  }
}

TEST_P(FlashLoraAttention, PrefillRowsOverPagedCaches) {
  const int32_t r = GetParam();
  check({"prefill", 9, 3, 64, 16, {{80, iota_rows(0, 80), r}}}, rng_);
  check({"chunk after a prefix", 9, 3, 64, 16, {{150, iota_rows(100, 150), r}}}, rng_);
  check({"past one key chunk", 9, 3, 64, 16, {{1100, iota_rows(500, 530), r}, {1050, {1049}, r}}}, rng_);
}

TEST_P(FlashLoraAttention, MixedWithSequencesWithoutLr) {
  const int32_t r = GetParam();
  check({"mixed", 6, 2, 40, 16, {{33, iota_rows(0, 33), r}, {20, {19}, 0}, {47, {3, 46, 17}, r}}}, rng_);
}

INSTANTIATE_TEST_SUITE_P(Ranks, FlashLoraAttention, ::testing::Values(1, 8, 16, 64));

// GQA shapes other than SmolLM2's 9/3: multi-head and one kv head.
TEST(FlashLoraAttentionShapes, GqaRatios) {
  std::mt19937 rng(5);
  for (auto [h, kvh] : {std::pair{4, 4}, std::pair{6, 1}}) {
    check({"heads " + std::to_string(h) + "/" + std::to_string(kvh),
           h,
           kvh,
           64,
           16,
           {{40, iota_rows(30, 40), 8}}},
          rng);
  }
}

// A row's output does not depend on the other rows of the call (batch
// invariance, docs/design.md §4): alone and among others it is bitwise the same.
TEST(FlashLoraAttentionShapes, RowAloneEqualsRowInABatch) {
  std::mt19937 rng(11);
  const Case batch{"batch", 9, 3, 64, 16, {{60, iota_rows(0, 60), 8}}};
  Built b = build(batch, rng);
  const std::vector<float> all = run(batch, b, 2, LrAttention::Path::kFused);
  // The same sequence with only its row at position 37 as query.
  Built one = b;
  const int32_t pos = 37, hd = 9 * 64;
  one.row_pos = {pos};
  one.row_indptr = {0, 1};
  one.q.assign(b.q.begin() + size_t(pos) * hd, b.q.begin() + size_t(pos + 1) * hd);
  const Case single{"single", 9, 3, 64, 16, {{60, {pos}, 8}}};
  const std::vector<float> alone = run(single, one, 1, LrAttention::Path::kFused);
  ASSERT_EQ(alone.size(), size_t(hd));
  for (int32_t i = 0; i < hd; ++i) ASSERT_EQ(alone[i], all[size_t(pos) * hd + i]) << "element " << i;
}

}  // namespace
}  // namespace agentkv
