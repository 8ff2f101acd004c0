// How much the relay layers move with the calibration chains drawn
// (profile-relay --bootstrap; issue 28, item 3): the chains are resampled
// with replacement, and each resample's profile is computed under every
// reading of the paper's rules (RelayProfileRules: det_rule x end_rule), on
// the same resamples, so the readings are compared paired.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sharing/relay_profile.h"
#include "util/status.h"

namespace agentkv {

struct RelayRuleSpread {
  std::string det_rule, end_rule;
  RelayProfile all;                   // on every chain
  std::vector<int32_t> l_det, l_end;  // one per resample
};

// kInvalidArgument for no samples or reps < 1 (and compute_relay_profile's
// errors). `rules` supplies tau, T, lambda and C.
Result<std::vector<RelayRuleSpread>> relay_bootstrap(const std::vector<RelaySampleStats>& samples,
                                                     const RelayProfileRules& rules, int32_t reps,
                                                     uint64_t seed);

// The q-quantile (0..1) of layer indices by nearest rank (the smallest x
// with at least q of v at or below it): always a layer that occurred.
int32_t layer_quantile(std::vector<int32_t> v, double q);

// The share of v equal to x.
double layer_share(const std::vector<int32_t>& v, int32_t x);

}  // namespace agentkv
