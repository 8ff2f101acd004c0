// profile-relay --bootstrap (src/workloads/relay_bootstrap.h): the resamples
// of identical chains all give the chains' own layers, every reading of the
// rules is there, the resamples move l_det when the chains disagree, and the
// quantiles are layers that occurred.
#include "workloads/relay_bootstrap.h"

#include <gtest/gtest.h>

#include <cmath>

namespace agentkv {
namespace {

// A chain whose rho's second difference (alpha) is +0.02 below layer
// `turn` and -0.02 from it on, so l_det = turn + 1 under either reading;
// sim_sum gives a dip at 6 and a recovery (l_end 10).
RelaySampleStats chain(int32_t turn) {
  RelaySampleStats st;
  st.tokens = 10;
  const std::vector<double> s = {1.0,  0.995, 0.98,  0.96,  0.94, 0.92, 0.90,
                                 0.93, 0.95,  0.951, 0.949, 0.95, 0.95, 0.951};
  for (double x : s) st.sim_sum.push_back(10 * x);
  st.rho.assign(s.size(), std::nan(""));
  st.rho[1] = st.rho[2] = 0.5;
  for (size_t l = 3; l < s.size(); ++l) {
    st.rho[l] = 2 * st.rho[l - 1] - st.rho[l - 2] + (static_cast<int32_t>(l) < turn ? 0.02 : -0.02);
  }
  return st;
}

TEST(RelayBootstrap, IdenticalChainsHaveNoSpread) {
  const std::vector<RelaySampleStats> same(8, chain(5));
  auto one = relay_profile_from_stats(same, RelayProfileRules{});
  ASSERT_TRUE(one.is_ok());
  EXPECT_EQ(one->l_det, 6);
  EXPECT_EQ(one->l_end, 10);
  auto r = relay_bootstrap(same, RelayProfileRules{}, 50, 7);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->size(), 4u);  // flip/onset x literal/before-tail
  EXPECT_EQ((*r)[0].det_rule, "flip");
  EXPECT_EQ((*r)[3].end_rule, "before-tail");
  for (const RelayRuleSpread& s : *r) {
    ASSERT_EQ(s.l_det.size(), 50u);
    EXPECT_EQ(layer_share(s.l_det, s.all.l_det), 1.0);
    EXPECT_EQ(layer_share(s.l_end, s.all.l_end), 1.0);
    EXPECT_EQ(s.all.samples, 8);
  }
}

TEST(RelayBootstrap, ChainsThatDisagreeSpreadTheDetectionLayer) {
  // Half the chains turn at 4, half at 8: between them the mean alpha is
  // 0.02 (1 - 2 x the share drawn of the first kind), so l_det is 5 or 9
  // by the draw.
  std::vector<RelaySampleStats> mixed;
  for (int i = 0; i < 6; ++i) mixed.push_back(chain(i % 2 ? 4 : 8));
  auto r = relay_bootstrap(mixed, RelayProfileRules{}, 400, 3);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const RelayRuleSpread& flip = (*r)[0];
  EXPECT_LT(layer_quantile(flip.l_det, 0.025), layer_quantile(flip.l_det, 0.975));
  EXPECT_LT(layer_share(flip.l_det, flip.all.l_det), 1.0);
  // Same resamples for every reading: as many draws each.
  for (const RelayRuleSpread& s : *r) EXPECT_EQ(s.l_det.size(), 400u);
}

TEST(RelayBootstrap, BadInputIsAnError) {
  EXPECT_EQ(relay_bootstrap({}, RelayProfileRules{}, 10, 1).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(relay_bootstrap({chain(5)}, RelayProfileRules{}, 0, 1).status().code(),
            ErrorCode::kInvalidArgument);
}

TEST(RelayBootstrap, QuantilesAreLayersByNearestRank) {
  const std::vector<int32_t> v = {3, 1, 2, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(layer_quantile(v, 0.0), 1);
  EXPECT_EQ(layer_quantile(v, 0.025), 1);
  EXPECT_EQ(layer_quantile(v, 0.5), 5);
  EXPECT_EQ(layer_quantile(v, 0.975), 10);
  EXPECT_EQ(layer_quantile(v, 1.0), 10);
  EXPECT_EQ(layer_quantile({}, 0.5), 0);
  EXPECT_DOUBLE_EQ(layer_share({4, 4, 5, 6}, 4), 0.5);
  EXPECT_DOUBLE_EQ(layer_share({}, 4), 0.0);
}

}  // namespace
}  // namespace agentkv
