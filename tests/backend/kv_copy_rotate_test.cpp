// kv_copy_rotate against writing the entries afresh at their new positions:
// K cached at p and moved by d must be K roped at p + d; V is moved bit for
// bit, and nothing but the destination entries changes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "rope_ref.h"
#include "test_helpers.h"

namespace agentkv {
namespace {

using test::random_vec;
using test::ref_rope;
using test::worst_rel_error;

// Measured worst relative error of the moved K against RoPE at p + d in
// double over KvCopyRotateTest's cases: 2.8e-7 (1 and 2 threads alike). The
// same two float rotations as rope_delta (rope_delta_test.cpp: 2.4e-7).
constexpr double kMovedKTol = 1e-6;

struct KvCase {
  std::string name;
  int32_t kv_heads, head_dim, rot_dim, block_size;
  RopeStyle style;
  bool factors;
  float freq_scale, attn_factor;
};

class KvCopyRotateTest : public ::testing::TestWithParam<int> {};

TEST_P(KvCopyRotateTest, EqualsKvWriteAtTheNewPositions) {
  auto be = backend_cpu_init({.n_threads = GetParam()});
  std::mt19937 rng(31);
  const KvCase cases[] = {
      {"normal, one token per block", 2, 64, 64, 1, RopeStyle::kNormal, false, 1.0f, 1.0f},
      {"normal, blocks of 16", 3, 64, 64, 16, RopeStyle::kNormal, false, 1.0f, 1.0f},
      {"neox partial, factors, scaled", 2, 128, 64, 16, RopeStyle::kNeox, true, 0.5f, 1.3f},
      {"neox, blocks of 5", 1, 32, 32, 5, RopeStyle::kNeox, false, 1.0f, 1.0f},
  };
  double worst = 0;
  for (const KvCase& c : cases) {
    SCOPED_TRACE(c.name);
    const int32_t bs = c.block_size, width = c.kv_heads * c.head_dim;
    auto ff = random_vec(rng, c.rot_dim / 2, 1.0f, 8.0f);
    RopeParams p{c.style, c.rot_dim, 10000.0f, c.factors ? ff.data() : nullptr, c.freq_scale, c.attn_factor};

    // Entries: sources in the first half of the pool's slots, destinations in
    // the second, each set shuffled, so neither is contiguous nor in order.
    const int64_t n = 45;
    const int64_t n_blocks = 2 * ((n + bs - 1) / bs) + 2;
    const int64_t half_slots = n_blocks / 2 * bs;
    std::vector<int64_t> all(half_slots);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<int64_t> src(all.begin(), all.begin() + n);
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<int64_t> dst(n);
    for (int64_t i = 0; i < n; ++i) dst[i] = half_slots + all[i];
    // Positions anywhere; deltas in runs (a moved segment shares one),
    // negative, zero, small and large.
    const int32_t kDeltas[] = {5, -5, 0, 1, 30000, -1000, 100000, -3};
    std::vector<int32_t> pos(n), delta(n), new_pos(n);
    for (int64_t i = 0; i < n; ++i) {
      pos[i] = int32_t(rng() % 40000) + 1000;
      delta[i] = kDeltas[(i / 6) % 8];
      new_pos[i] = pos[i] + delta[i];
    }

    const int64_t stride = int64_t(bs) * width + 3;  // blocks need not be packed
    auto kpool = random_vec(rng, stride * n_blocks), vpool = random_vec(rng, stride * n_blocks);
    KvLayerView kv{kpool.data(), vpool.data(), stride, bs, c.kv_heads, c.head_dim};
    const auto k_raw = random_vec(rng, n * width), v = random_vec(rng, n * width);
    auto k_at_pos = k_raw;
    be->rope(k_at_pos.data(), pos.data(), n, c.kv_heads, c.head_dim, p);
    be->kv_write(kv, k_at_pos.data(), v.data(), src.data(), n);

    // Expected pools: the same, with K roped at p + d and V written at dst.
    auto k_want_pool = kpool, v_want_pool = vpool;
    auto k_direct = k_raw;
    be->rope(k_direct.data(), new_pos.data(), n, c.kv_heads, c.head_dim, p);
    KvLayerView want{k_want_pool.data(), v_want_pool.data(), stride, bs, c.kv_heads, c.head_dim};
    be->kv_write(want, k_direct.data(), v.data(), dst.data(), n);

    be->kv_copy_rotate(kv, src.data(), dst.data(), delta.data(), n, p);

    EXPECT_TRUE(vpool == v_want_pool) << "V: moved bit for bit, sources and the rest untouched";
    // K: read back the destination rows, then put the expected ones in
    // their place so that the whole pool can be compared bit for bit.
    std::vector<float> moved(n * width);
    auto at = [&](int64_t slot) { return (slot / bs) * stride + (slot % bs) * width; };
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(&kpool[at(dst[i])], width, &moved[i * width]);
      std::copy_n(&k_want_pool[at(dst[i])], width, &kpool[at(dst[i])]);
    }
    EXPECT_TRUE(kpool == k_want_pool) << "K: only the destination entries change";

    const double err = worst_rel_error(moved, ref_rope(k_raw, new_pos, c.kv_heads, c.head_dim, p));
    EXPECT_LE(err, kMovedKTol);
    EXPECT_LE(worst_rel_error(moved, std::vector<double>(k_direct.begin(), k_direct.end())), kMovedKTol);
    worst = std::max(worst, err);
    // The rotation is rope_delta's, bit for bit.
    auto k_delta = k_at_pos;
    be->rope_delta(k_delta.data(), delta.data(), n, c.kv_heads, c.head_dim, p);
    EXPECT_TRUE(moved == k_delta) << "moved K differs from rope_delta's";
  }
  std::printf("[ measured ] kv_copy_rotate worst relative error of K %.3g, tolerance %.3g\n", worst,
              kMovedKTol);
}

INSTANTIATE_TEST_SUITE_P(Threads, KvCopyRotateTest, ::testing::Values(1, 2));

}  // namespace
}  // namespace agentkv
