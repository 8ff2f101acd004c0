// attention with AttentionPlan::colsum (RelayCaching's influence, fused in
// the attention pass) against column sums of causal softmax attention
// computed in double from the definition, per row and kv head; and the
// attention output with the column sums on is bitwise the output without.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

#include "backend/backend.h"
#include "test_helpers.h"

namespace agentkv {
namespace {

using test::random_vec;
using test::worst_rel_error;

// Worst relative error measured over these cases (threads 1 and 2, block
// sizes 1, 16, 32): 8.3e-7 for rows up to 97 keys, 1.83e-6 with the rows of
// up to 1101 keys (merged across key chunks; 2026-11-25); about 3x that.
constexpr double kTol = 6e-6;

struct Seq {
  std::vector<int32_t> row_pos;  // query rows
  int32_t n_keys;
};

void check(const std::vector<Seq>& seqs, int32_t n_heads, int32_t kv_heads, int32_t D, int32_t bs, int n_threads,
           double* worst) {
  std::mt19937 rng(91);
  auto be = backend_cpu_init({.n_threads = n_threads});
  const int32_t width = kv_heads * D, group = n_heads / kv_heads;
  const float scale = 1.0f / std::sqrt(float(D));
  int32_t total_blocks = 0;
  for (const Seq& s : seqs) total_blocks += (s.n_keys + bs - 1) / bs;
  const int64_t stride = int64_t(bs) * width;
  std::vector<float> kpool(stride * total_blocks), vpool(kpool.size());
  std::vector<int32_t> ids(total_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> row_indptr = {0}, row_pos, block_indptr = {0}, block_ids, slot;
  std::vector<std::vector<float>> keys;
  int32_t next = 0, n_slots = 0, longest = 0;
  for (const Seq& s : seqs) {
    const auto k = random_vec(rng, size_t(s.n_keys) * width, -2, 2);
    const auto v = random_vec(rng, size_t(s.n_keys) * width, -2, 2);
    const int32_t nb = (s.n_keys + bs - 1) / bs;
    for (int32_t b = 0; b < nb; ++b) block_ids.push_back(ids[next++]);
    for (int32_t j = 0; j < s.n_keys; ++j) {
      const int64_t off = int64_t(block_ids[block_indptr.back() + j / bs]) * stride + int64_t(j % bs) * width;
      std::copy_n(&k[size_t(j) * width], width, &kpool[off]);
      std::copy_n(&v[size_t(j) * width], width, &vpool[off]);
    }
    keys.push_back(k);
    block_indptr.push_back(int32_t(block_ids.size()));
    for (size_t i = 0; i < s.row_pos.size(); ++i) {
      row_pos.push_back(s.row_pos[i]);
      slot.push_back(i % 2 == 0 ? n_slots++ : -1);  // every other row asks
      longest = std::max(longest, s.row_pos[i] + 1);
    }
    row_indptr.push_back(int32_t(row_pos.size()));
  }
  const int64_t n_rows = int64_t(row_pos.size());
  const auto q = random_vec(rng, size_t(n_rows) * n_heads * D, -2, 2);
  KvLayerView kv{kpool.data(), vpool.data(), stride, bs, kv_heads, D};
  AttentionPlan plain{int32_t(seqs.size()), row_indptr.data(), row_pos.data(), block_indptr.data(), block_ids.data()};
  std::vector<float> out_plain(size_t(n_rows) * n_heads * D), out(out_plain.size());
  be->attention(plain, q.data(), n_heads, kv, scale, out_plain.data());
  AttentionPlan fused = plain;
  std::vector<float> colsum(size_t(n_slots) * kv_heads * longest, 0.0f);
  fused.colsum_slot = slot.data();
  fused.colsum = colsum.data();
  fused.colsum_stride = longest;
  be->attention(fused, q.data(), n_heads, kv, scale, out.data());
  EXPECT_TRUE(out == out_plain) << "the column sums changed the attention output";

  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int32_t r = row_indptr[s]; r < row_indptr[s + 1]; ++r) {
      if (slot[r] < 0) continue;
      for (int32_t g = 0; g < kv_heads; ++g) {
        const int32_t p = row_pos[r];
        std::vector<double> want(longest, 0.0);
        for (int32_t h = g * group; h < (g + 1) * group; ++h) {
          std::vector<double> sc(p + 1);
          double mx = -INFINITY, sum = 0;
          for (int32_t j = 0; j <= p; ++j) {
            double dot = 0;
            for (int32_t d = 0; d < D; ++d) dot += double(q[(size_t(r) * n_heads + h) * D + d]) * keys[s][size_t(j) * width + g * D + d];
            mx = std::max(mx, sc[j] = dot * scale);
          }
          for (double& x : sc) sum += (x = std::exp(x - mx));
          for (int32_t j = 0; j <= p; ++j) want[j] += sc[j] / sum;
        }
        const std::vector<float> got(colsum.begin() + (int64_t(slot[r]) * kv_heads + g) * longest,
                                     colsum.begin() + (int64_t(slot[r]) * kv_heads + g + 1) * longest);
        const double err = worst_rel_error(got, want);
        EXPECT_LE(err, kTol) << "row " << r << " kv head " << g;
        *worst = std::max(*worst, err);
      }
    }
  }
}

TEST(AttentionFusedColsum, MatchesTheDefinitionAndLeavesTheOutputAlone) {
  double worst = 0;
  for (int32_t bs : {1, 16, 32}) {
    for (int threads : {1, 2}) {
      // Decode rows of three sequences (one at a tile edge), and a prefill
      // chunk whose rows share items.
      check({{{40}, 41}, {{31}, 64}, {{96}, 97}}, 9, 3, 64, bs, threads, &worst);
      check({{{5, 6, 7, 8, 9, 33}, 34}}, 4, 2, 16, bs, threads, &worst);
      // Rows past the first 512-key chunk (merged partials), one with others.
      check({{{1100}, 1101}, {{500, 511, 512, 600, 1030}, 1031}}, 9, 3, 64, bs, threads, &worst);
    }
  }
  std::printf("[ measured ] fused colsum worst relative error %.3g (tolerance %.3g)\n", worst, kTol);
}

}  // namespace
}  // namespace agentkv
