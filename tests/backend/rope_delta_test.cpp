// rope_delta against RoPE at the moved position: R(p + d) = R(d) R(p), so
// rope(k, p) then rope_delta(d) must be rope(k, p + d), with attn_factor in
// rope only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "backend/backend.h"
#include "rope_ref.h"
#include "test_helpers.h"

namespace agentkv {
namespace {

using test::random_vec;
using test::ref_rope;
using test::worst_rel_error;

// Measured worst relative error of rope(p) + rope_delta(d) against RoPE at
// p + d in double (test::worst_rel_error) over RopeDeltaTest's cases: 2.4e-7
// (1 and 2 threads alike; rope alone at p + d: 1.7e-7). Two float rotations,
// each off by a few ulp; the angles are in double, so d = 1e6 is as accurate
// as d = 1.
constexpr double kRopeDeltaTol = 1e-6;

// Pairs (p, d): zero, small, negative (back to 0, and below 0), large
// (30000, 1e6) and ending past rope's cos/sin table (2^15 positions).
struct Move {
  int32_t pos, delta;
};
const Move kMoves[] = {{0, 0},           {7, 0},          {5, 3},    {100, -100}, {40, -7},
                       {3, 30000},       {30000, -29990}, {1000, 1}, {0, 30000},  {40000, 30000},
                       {100000, -99999}, {5, 1000000},    {12, -20}, {3, -1}};

struct Shape {
  int32_t head_dim, rot_dim;
};

class RopeDeltaTest : public ::testing::TestWithParam<int> {};

// Every style, with and without freq_scale, freq_factors and attn_factor, the
// whole head rotated and only part of it.
TEST_P(RopeDeltaTest, EqualsRopeAtTheMovedPosition) {
  auto be = backend_cpu_init({.n_threads = GetParam()});
  std::mt19937 rng(21);
  std::vector<int32_t> pos, delta, moved_pos;
  for (Move m : kMoves) {
    pos.push_back(m.pos);
    delta.push_back(m.delta);
    moved_pos.push_back(m.pos + m.delta);
  }
  const int64_t rows = int64_t(pos.size());
  const int32_t n_heads = 3;
  double worst = 0, worst_direct = 0;
  for (RopeStyle style : {RopeStyle::kNormal, RopeStyle::kNeox})
    for (Shape sh : {Shape{64, 64}, Shape{48, 24}})
      for (float freq_scale : {1.0f, 0.25f})
        for (bool factors : {false, true})
          for (float attn_factor : {1.0f, 1.3f}) {
            SCOPED_TRACE(::testing::Message() << "style " << int(style) << " head_dim " << sh.head_dim
                                              << " rot_dim " << sh.rot_dim << " freq_scale " << freq_scale
                                              << " factors " << factors << " attn_factor " << attn_factor);
            auto ff = random_vec(rng, sh.rot_dim / 2, 1.0f, 8.0f);
            RopeParams p{style, sh.rot_dim, 10000.0f, factors ? ff.data() : nullptr, freq_scale, attn_factor};
            const auto x = random_vec(rng, size_t(rows) * n_heads * sh.head_dim);
            auto moved = x;
            be->rope(moved.data(), pos.data(), rows, n_heads, sh.head_dim, p);
            be->rope_delta(moved.data(), delta.data(), rows, n_heads, sh.head_dim, p);
            auto direct = x;
            be->rope(direct.data(), moved_pos.data(), rows, n_heads, sh.head_dim, p);

            const double err = worst_rel_error(moved, ref_rope(x, moved_pos, n_heads, sh.head_dim, p));
            EXPECT_LE(err, kRopeDeltaTol);
            EXPECT_LE(worst_rel_error(moved, std::vector<double>(direct.begin(), direct.end())),
                      kRopeDeltaTol);
            worst = std::max(worst, err);
            worst_direct = std::max(worst_direct,
                                    worst_rel_error(direct, ref_rope(x, moved_pos, n_heads, sh.head_dim, p)));
          }
  std::printf(
      "[ measured ] rope_delta worst relative error %.3g (rope alone at p + d: %.3g), tolerance %.3g\n",
      worst, worst_direct, kRopeDeltaTol);
}

INSTANTIATE_TEST_SUITE_P(Threads, RopeDeltaTest, ::testing::Values(1, 2));

// A zero delta is the identity, bit for bit, whatever attn_factor.
TEST(RopeDelta, ZeroDeltaLeavesRowsUnchanged) {
  auto be = backend_cpu_init({.n_threads = 2});
  std::mt19937 rng(22);
  std::vector<float> ff = random_vec(rng, 16, 1.0f, 4.0f);
  RopeParams p{RopeStyle::kNeox, 32, 10000.0f, ff.data(), 0.5f, 1.5f};
  const std::vector<int32_t> delta(40, 0);
  const auto x = random_vec(rng, delta.size() * 2 * 32);
  auto y = x;
  be->rope_delta(y.data(), delta.data(), int64_t(delta.size()), 2, 32, p);
  EXPECT_TRUE(y == x) << "a zero delta changed a row";
}

// Rows are independent: the result does not depend on the thread count, and
// a delta and its negation return to the start (a rotation: no attn_factor).
TEST(RopeDelta, ThreadCountInvariantAndReversible) {
  auto be1 = backend_cpu_init({.n_threads = 1});
  auto be2 = backend_cpu_init({.n_threads = 2});
  std::mt19937 rng(23);
  RopeParams p{RopeStyle::kNormal, 64, 500000.0f, nullptr, 1.0f, 2.0f};
  std::vector<int32_t> delta(100), neg(100);
  for (size_t i = 0; i < delta.size(); ++i) {
    delta[i] = int32_t(i / 7) * 997 - 40000;  // runs of equal deltas, as a moved segment has
    neg[i] = -delta[i];
  }
  const auto x = random_vec(rng, delta.size() * 4 * 64);
  auto y1 = x, y2 = x;
  be1->rope_delta(y1.data(), delta.data(), int64_t(delta.size()), 4, 64, p);
  be2->rope_delta(y2.data(), delta.data(), int64_t(delta.size()), 4, 64, p);
  EXPECT_TRUE(y1 == y2) << "1 and 2 threads differ";
  be2->rope_delta(y2.data(), neg.data(), int64_t(neg.size()), 4, 64, p);
  const double err = worst_rel_error(y2, std::vector<double>(x.begin(), x.end()));
  EXPECT_LE(err, kRopeDeltaTol);
}

}  // namespace
}  // namespace agentkv
