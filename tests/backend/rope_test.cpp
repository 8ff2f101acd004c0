#include <gtest/gtest.h>

#include <cmath>

#include "backend/backend.h"
#include "rope_ref.h"
#include "test_helpers.h"

namespace agentkv {
namespace {

using test::all_close;
using test::random_vec;
using test::ref_rope;

struct RopeCase {
  const char* name;
  RopeStyle style;
  int32_t head_dim, rot_dim;
  bool factors;
  float freq_scale, attn_factor;
};

class RopeTest : public ::testing::TestWithParam<int> {};

TEST_P(RopeTest, MatchesReference) {
  auto be = backend_cpu_init({.n_threads = GetParam()});
  std::mt19937 rng(5);
  const RopeCase cases[] = {
      {"normal", RopeStyle::kNormal, 64, 64, false, 1.0f, 1.0f},
      {"neox", RopeStyle::kNeox, 64, 64, false, 1.0f, 1.0f},
      {"normal partial", RopeStyle::kNormal, 64, 32, false, 1.0f, 1.0f},
      {"neox partial", RopeStyle::kNeox, 128, 64, false, 1.0f, 1.0f},
      {"normal factors", RopeStyle::kNormal, 64, 64, true, 1.0f, 1.0f},
      {"neox factors scaled", RopeStyle::kNeox, 32, 24, true, 0.25f, 1.2f},
  };
  // Repeated positions, out of order, large (table growth) and negative
  // (delta rotations), with a tiny table first and then a larger one.
  const std::vector<int32_t> pos_sets[] = {{0, 1, 2}, {5, 0, 4095, 17, 17, -3, 100000, 2}};
  for (const RopeCase& c : cases) {
    auto factors = random_vec(rng, c.rot_dim / 2, 1.0f, 8.0f);
    RopeParams p{c.style,      c.rot_dim,    100000.0f, c.factors ? factors.data() : nullptr,
                 c.freq_scale, c.attn_factor};
    for (const auto& pos : pos_sets) {
      const int32_t n_heads = 3;
      auto x = random_vec(rng, pos.size() * n_heads * c.head_dim);
      auto want = ref_rope(x, pos, n_heads, c.head_dim, p);
      be->rope(x.data(), pos.data(), int64_t(pos.size()), n_heads, c.head_dim, p);
      EXPECT_TRUE(all_close(x, want, 1e-5)) << c.name << " with " << pos.size() << " positions";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, RopeTest, ::testing::Values(1, 2));

// RoPE is a rotation by an angle linear in the position, so rotating by b and
// then by a equals rotating by a + b: what moving a cached K relies on.
TEST(Rope, ComposesAdditively) {
  auto be = backend_cpu_init({.n_threads = 2});
  std::mt19937 rng(9);
  for (RopeStyle style : {RopeStyle::kNormal, RopeStyle::kNeox}) {
    std::vector<float> factors = random_vec(rng, 16, 1.0f, 4.0f);
    RopeParams p{style, 32, 10000.0f, factors.data(), 0.5f, 1.0f};
    const std::vector<int32_t> a = {0, 7, 100, 1000, 3, 250};
    const std::vector<int32_t> b = {5, 0, 31, -999, 2000, -250};
    std::vector<int32_t> sum(a.size());
    for (size_t i = 0; i < a.size(); ++i) sum[i] = a[i] + b[i];
    const int32_t n_heads = 2, head_dim = 48;
    auto x = random_vec(rng, a.size() * n_heads * head_dim);
    auto once = x;
    be->rope(x.data(), b.data(), int64_t(b.size()), n_heads, head_dim, p);
    be->rope(x.data(), a.data(), int64_t(a.size()), n_heads, head_dim, p);
    be->rope(once.data(), sum.data(), int64_t(sum.size()), n_heads, head_dim, p);
    std::vector<double> once_d(once.begin(), once.end());
    EXPECT_TRUE(all_close(x, once_d, 1e-5));
  }
}

// The cos/sin table is kept between calls; changing any parameter, including
// the values behind the same freq_factors pointer, must not reuse it.
TEST(Rope, ParameterChangeIsNotServedFromCache) {
  auto be = backend_cpu_init({.n_threads = 1});
  std::mt19937 rng(13);
  std::vector<float> factors(8, 1.0f);
  RopeParams p{RopeStyle::kNormal, 16, 10000.0f, factors.data(), 1.0f, 1.0f};
  const std::vector<int32_t> pos = {3, 40, 41};
  for (int variant = 0; variant < 5; ++variant) {
    if (variant == 1) factors[2] = 3.0f;  // same pointer, new values
    if (variant == 2) p.freq_base = 500.0f;
    if (variant == 3) p.freq_scale = 2.0f;
    if (variant == 4) p.attn_factor = 0.5f;
    auto x = random_vec(rng, pos.size() * 16);
    auto want = ref_rope(x, pos, 1, 16, p);
    be->rope(x.data(), pos.data(), 3, 1, 16, p);
    EXPECT_TRUE(all_close(x, want, 1e-5)) << "variant " << variant;
  }
}

// Gemma 3's layers alternate between two bases (local 10000, global 1e6):
// the backend keeps a table for each, and a third set replaces the older.
// Every call matches the reference and equals a fresh backend's bits.
TEST(Rope, AlternatingParameterSets) {
  auto be = backend_cpu_init({.n_threads = 1});
  std::mt19937 rng(17);
  const RopeParams local{RopeStyle::kNeox, 32, 10000.0f, nullptr, 1.0f, 1.0f};
  const RopeParams global{RopeStyle::kNeox, 32, 1000000.0f, nullptr, 1.0f, 1.0f};
  const RopeParams third{RopeStyle::kNeox, 32, 500.0f, nullptr, 1.0f, 1.0f};
  const std::vector<int32_t> pos = {0, 7, 513, 2000};
  const RopeParams* order[] = {&local, &global, &local, &global, &third, &local, &global, &third, &third};
  for (const RopeParams* p : order) {
    auto x = random_vec(rng, pos.size() * 2 * 32);
    auto fresh = x;
    auto want = ref_rope(x, pos, 2, 32, *p);
    be->rope(x.data(), pos.data(), 4, 2, 32, *p);
    EXPECT_TRUE(all_close(x, want, 1e-5)) << "base " << p->freq_base;
    backend_cpu_init({.n_threads = 1})->rope(fresh.data(), pos.data(), 4, 2, 32, *p);
    EXPECT_EQ(x, fresh) << "base " << p->freq_base;
  }
}

}  // namespace
}  // namespace agentkv
