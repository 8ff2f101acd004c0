// The relay layer profile (sharing/relay_profile.h): Spearman against hand
// computation, the paper's rules for l_start, l_end and l_det on synthetic
// similarity curves, and the profile file's checks.
#include "sharing/relay_profile.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

namespace agentkv {
namespace {

TEST(RelayProfile, ValueDeviationIsOneMinusTheMeanHeadCosine) {
  const float a[4] = {1, 0, 0, 2}, same[4] = {2, 0, 0, 5}, mixed[4] = {0, 3, 0, -1};
  EXPECT_NEAR(value_deviation(a, same, 4, 2), 0.0f, 1e-7);
  // Head 0 orthogonal (cos 0), head 1 opposite (cos -1): 1 - (0 - 1) / 2.
  EXPECT_NEAR(value_deviation(a, mixed, 4, 2), 1.5f, 1e-7);
  // One head of 4: cos = (0 + 0 + 0 - 2) / (sqrt(5) sqrt(10)).
  EXPECT_NEAR(value_deviation(a, mixed, 4, 4), 1.0 + 2.0 / std::sqrt(50.0), 1e-6);
  const float zero[4] = {0, 0, 0, 0};
  EXPECT_EQ(value_deviation(a, zero, 4, 2), 0.0f);
}

TEST(RelayProfile, SpearmanMatchesHandComputation) {
  EXPECT_DOUBLE_EQ(spearman({1, 2, 3, 4}, {10, 20, 30, 40}), 1.0);
  EXPECT_DOUBLE_EQ(spearman({1, 2, 3, 4}, {4, 3, 2, 1}), -1.0);
  // Ranks (1, 2, 3, 4, 5) and (2, 1, 4, 3, 5): 1 - 6 * 4 / (5 * 24) = 0.8.
  EXPECT_NEAR(spearman({1, 2, 3, 4, 5}, {2, 1, 4, 3, 5}), 0.8, 1e-12);
  // Ties take average ranks; a constant side has no correlation.
  EXPECT_NEAR(spearman({1, 1, 2}, {1, 2, 3}), std::sqrt(3.0) / 2.0, 1e-12);
  EXPECT_TRUE(std::isnan(spearman({1, 1, 1}, {1, 2, 3})));
  EXPECT_TRUE(std::isnan(spearman({1}, {1})));
}

// One sample per curve: every token deviates by 1 - s_l; token deviations get
// a per-layer ranking that the rho test controls.
DeviationSample sample_from(const std::vector<double>& s, int32_t tokens = 6) {
  DeviationSample d(s.size());
  for (size_t l = 0; l < s.size(); ++l) {
    for (int32_t t = 0; t < tokens; ++t) {
      // A small spread keeps the mean at 1 - s_l and the ranking stable.
      d[l].push_back(static_cast<float>(1.0 - s[l] + 1e-4 * (t - (tokens - 1) / 2.0)));
    }
  }
  return d;
}

TEST(RelayProfile, UShapedCurveGivesTheBand) {
  // High for 0..2, a dip to 0.80 at layer 8, recovery to ~0.95 from 12 on.
  const std::vector<double> s = {1.0,  0.999, 0.995, 0.97, 0.93, 0.9,  0.87, 0.84, 0.80, 0.85,
                                 0.90, 0.93,  0.95,  0.951, 0.949, 0.95, 0.952, 0.948, 0.95, 0.951};
  auto p = compute_relay_profile({sample_from(s)}, RelayProfileRules{});
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->l_start, 2);  // the last layer of the initial run >= 0.99
  // Tail (last 5): mean 0.9502, sigma 0.00133: base 0.9489, steps < 0.00265.
  // From the minimum (8): 9..11 are below base; 11 -> 12 steps by 0.02; 12
  // is followed by 13 and 14 (>= base, steps of 0.001 and 0.002).
  EXPECT_EQ(p->l_end, 12);
  EXPECT_GE(p->l_det, p->l_start);
  EXPECT_LT(p->l_det, p->l_end);
  EXPECT_EQ(p->samples, 1);
  EXPECT_EQ(p->tokens, 6);
  EXPECT_NEAR(p->similarity[8], 0.80, 1e-6);
}

TEST(RelayProfile, NoRecoveryMeansTheBandReachesTheLastLayer) {
  std::vector<double> s;
  for (int l = 0; l < 12; ++l) s.push_back(1.0 - 0.02 * l);
  auto p = compute_relay_profile({sample_from(s)}, RelayProfileRules{});
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->l_start, 0);  // s_1 = 0.98 < 0.99
  EXPECT_EQ(p->l_end, 12);
}

TEST(RelayProfile, DetectionLayerFollowsTheRankCurvature) {
  // Token rankings: identical across layers 0..4, then reversed at 5 and
  // kept: rho = 1, 1, 1, 1, -1, 1...; alpha_5 = -1 - 2 + 1 < 0 after alpha_4 = 0
  // (not positive). Put a rise first: layer 3 scrambled.
  const int32_t L = 10, T = 6;
  DeviationSample d(L);
  const std::vector<std::vector<float>> orders = {
      {1, 2, 3, 4, 5, 6}, {1, 2, 3, 4, 5, 6}, {1, 2, 3, 4, 5, 6}, {2, 1, 4, 3, 6, 5},
      {1, 2, 3, 4, 5, 6}, {1, 2, 3, 4, 5, 6}, {1, 2, 3, 4, 5, 6}, {1, 2, 3, 4, 5, 6},
      {1, 2, 3, 4, 5, 6}, {1, 2, 3, 4, 5, 6}};
  for (int32_t l = 0; l < L; ++l) {
    for (int32_t t = 0; t < T; ++t) d[l].push_back(0.01f * orders[l][t]);
  }
  auto p = compute_relay_profile({d}, RelayProfileRules{});
  ASSERT_TRUE(p.is_ok());
  // rho: -, 1, 1, r, r, 1, 1, ... with r = spearman of the swapped pairs
  // (0.8286). alpha_3 = r - 2 + 1 < 0, alpha_4 = r - 2r + 1 > 0,
  // alpha_5 = 1 - 2r + r = 1 - r > 0, alpha_6 = 1 - 2 + r < 0: l* = 6.
  EXPECT_NEAR(p->rho[3], spearman(std::vector<float>(orders[3]), std::vector<float>(orders[2])), 1e-9);
  EXPECT_EQ(p->l_det, std::min(7, p->l_end - 1));
}

// SmolLM2-135M's measured curve (profiles/smollm2-135m-instruct-q4_1.relay.json,
// 32 chains, rounded to 4 digits), where both open cases of the rules bind.
RelaySampleStats smollm2_curve() {
  const std::vector<double> s = {1.0,    0.9944, 0.9877, 0.9842, 0.9808, 0.9763, 0.9656, 0.9695,
                                 0.9541, 0.964,  0.9548, 0.9439, 0.9493, 0.9401, 0.9278, 0.9077,
                                 0.9057, 0.9245, 0.9095, 0.8812, 0.8973, 0.9026, 0.9017, 0.939,
                                 0.9361, 0.8944, 0.8899, 0.8824, 0.8762, 0.8439};
  const double n = std::nan("");
  const std::vector<double> rho = {n,      n,      0.8588, 0.8993, 0.9309, 0.8324, 0.9203, 0.9307,
                                   0.8954, 0.9321, 0.9368, 0.9318, 0.9032, 0.902,  0.9371, 0.9461,
                                   0.932,  0.9154, 0.9223, 0.9276, 0.9195, 0.8835, 0.9631, 0.9156,
                                   0.9615, 0.8513, 0.9681, 0.9126, 0.9363, 0.9481};
  RelaySampleStats st;
  st.tokens = 100;
  for (double x : s) st.sim_sum.push_back(100 * x);
  st.rho = rho;
  return st;
}

TEST(RelayProfile, EachReadingOfTheOpenCasesOnSmolLM2sCurve) {
  auto with = [](const char* det, const char* end) {
    RelayProfileRules r;
    r.det_rule = det;
    r.end_rule = end;
    auto p = relay_profile_from_stats({smollm2_curve()}, r);
    EXPECT_TRUE(p.is_ok()) << p.status().message();
    return *p;
  };
  // alpha_4 = 0.9309 - 2 x 0.8993 + 0.8588 = -0.0089 (negative from the
  // start), alpha_5 = -0.1301, alpha_6 = +0.1864, alpha_7 = -0.0775: the
  // first flip is at 7 (l_det 8), the onset at 4 (l_det 5).
  const RelayProfile flip = with("flip", "literal"), onset = with("onset", "literal");
  EXPECT_EQ(flip.l_start, 1);
  EXPECT_EQ(flip.l_det, 8);
  EXPECT_EQ(onset.l_det, 5);
  // The least similar layer is the last: the literal scan finds no recovery.
  EXPECT_EQ(flip.l_end, 30);
  // Before the tail (layers 25-29: mean 0.87736, sigma 0.01786, base 0.8595,
  // steps < 0.0357) the dip is layer 19 (0.8812), followed by 0.8973 and
  // 0.9026: l_end 19.
  const RelayProfile tail = with("flip", "before-tail");
  EXPECT_EQ(tail.l_end, 19);
  EXPECT_EQ(tail.l_det, 8);
  EXPECT_EQ(with("onset", "before-tail").l_det, 5);
  RelayProfileRules bad;
  bad.det_rule = "first";
  EXPECT_EQ(relay_profile_from_stats({smollm2_curve()}, bad).status().code(), ErrorCode::kInvalidArgument);
  bad = RelayProfileRules{};
  bad.end_rule = "tail";
  EXPECT_EQ(relay_profile_from_stats({smollm2_curve()}, bad).status().code(), ErrorCode::kInvalidArgument);
}

TEST(RelayProfile, SampleStatsGiveTheProfileOfTheSamples) {
  std::vector<double> s;
  for (int l = 0; l < 12; ++l) s.push_back(1.0 - 0.02 * l);
  const DeviationSample d = sample_from(s, 9);
  auto st = relay_sample_stats(d);
  ASSERT_TRUE(st.is_ok());
  EXPECT_EQ(st->tokens, 9);
  EXPECT_TRUE(std::isnan(st->rho[0]));
  EXPECT_DOUBLE_EQ(st->rho[3], spearman(d[3], d[2]));
  auto a = compute_relay_profile({d, d}, RelayProfileRules{});
  auto b = relay_profile_from_stats({*st, *st}, RelayProfileRules{});
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(a->similarity, b->similarity);
  EXPECT_EQ(a->l_end, b->l_end);
  EXPECT_EQ(b->tokens, 18);
}

TEST(RelayProfile, ALayerAtTheRoundingFloorRanksNothing) {
  // Layer 0 deviates by f16 rounding (~1e-8, in some order): its ranking is
  // noise, and rho_1 is undefined; layers 1 and 2 deviate for real.
  DeviationSample d(3);
  d[0] = {1.5e-8f, 1.2e-8f, 1.7e-8f, 1.1e-8f};
  d[1] = {0.01f, 0.02f, 0.03f, 0.04f};
  d[2] = {0.02f, 0.01f, 0.04f, 0.03f};
  auto st = relay_sample_stats(d);
  ASSERT_TRUE(st.is_ok());
  EXPECT_TRUE(std::isnan(st->rho[1]));
  EXPECT_NEAR(st->rho[2], 0.6, 1e-12);          // ranks (1 2 3 4) against (2 1 4 3)
  d[0] = {1.5e-4f, 1.2e-4f, 1.7e-4f, 1.1e-4f};  // above the floor: ranked
  st = relay_sample_stats(d);
  ASSERT_TRUE(st.is_ok());
  EXPECT_FALSE(std::isnan(st->rho[1]));
}

TEST(RelayProfile, BadSamplesAreErrors) {
  EXPECT_FALSE(compute_relay_profile({}, RelayProfileRules{}).is_ok());
  DeviationSample ragged(3);
  ragged[0] = {0.1f, 0.2f};
  ragged[1] = {0.1f};
  ragged[2] = {0.1f, 0.2f};
  EXPECT_FALSE(compute_relay_profile({ragged}, RelayProfileRules{}).is_ok());
}

TEST(RelayProfile, FileRoundTripsAndIsChecked) {
  std::vector<double> s;
  for (int l = 0; l < 12; ++l) s.push_back(1.0 - 0.02 * l);
  auto p = compute_relay_profile({sample_from(s)}, RelayProfileRules{});
  ASSERT_TRUE(p.is_ok());
  p->model_id = "abc";
  p->model_name = "tiny";
  const std::string path = ::testing::TempDir() + "/relay_profile.json";
  ASSERT_TRUE(save_relay_profile(*p, path).is_ok());
  auto q = load_relay_profile(path, "abc", 12);
  ASSERT_TRUE(q.is_ok()) << q.status().message();
  EXPECT_EQ(q->l_start, p->l_start);
  EXPECT_EQ(q->l_det, p->l_det);
  EXPECT_EQ(q->l_end, p->l_end);
  EXPECT_EQ(load_relay_profile(path, "other", 12).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(load_relay_profile(path, "abc", 8).status().code(), ErrorCode::kParse);  // l_end past 8 layers
  EXPECT_EQ(load_relay_profile(path + ".missing", "abc", 12).status().code(), ErrorCode::kIo);
  for (const char* text : {"", "[]", "{\"format\": \"x\"}", "{\"format\": \"agentkv-relay-profile\", \"version\": 2}",
                           "{\"format\": \"agentkv-relay-profile\", \"version\": 1, \"model\": {\"id\": \"abc\"}, "
                           "\"layers\": {\"l_start\": 3, \"l_det\": 1, \"l_end\": 5}}",
                           "{\"format\": \"agentkv-relay-profile\", \"version\": 1, \"model\": {\"id\": \"abc\"}, "
                           "\"layers\": {\"l_start\": \"1\", \"l_det\": 1, \"l_end\": 5}}"}) {
    std::ofstream(path) << text;
    auto r = load_relay_profile(path, "abc", 12);
    EXPECT_FALSE(r.is_ok()) << text;
  }
}

}  // namespace
}  // namespace agentkv
