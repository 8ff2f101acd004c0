#include "workloads/relay_bootstrap.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace agentkv {

Result<std::vector<RelayRuleSpread>> relay_bootstrap(const std::vector<RelaySampleStats>& samples,
                                                     const RelayProfileRules& rules, int32_t reps,
                                                     uint64_t seed) {
  if (samples.empty()) return make_error(ErrorCode::kInvalidArgument, "no calibration samples to resample");
  if (reps < 1)
    return make_error(ErrorCode::kInvalidArgument, "bootstrap resamples must be >= 1, got ", reps);
  std::vector<RelayRuleSpread> out;
  for (const char* det : {"flip", "onset"}) {
    for (const char* end : {"literal", "before-tail"}) {
      RelayRuleSpread r;
      r.det_rule = det;
      r.end_rule = end;
      RelayProfileRules ru = rules;
      ru.det_rule = det;
      ru.end_rule = end;
      AKV_ASSIGN_OR_RETURN(r.all, relay_profile_from_stats(samples, ru));
      out.push_back(std::move(r));
    }
  }
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, samples.size() - 1);
  std::vector<RelaySampleStats> draw(samples.size());
  for (int32_t b = 0; b < reps; ++b) {
    for (RelaySampleStats& d : draw) d = samples[pick(rng)];
    for (RelayRuleSpread& r : out) {
      AKV_ASSIGN_OR_RETURN(RelayProfile p, relay_profile_from_stats(draw, r.all.rules));
      r.l_det.push_back(p.l_det);
      r.l_end.push_back(p.l_end);
    }
  }
  return out;
}

int32_t layer_quantile(std::vector<int32_t> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::ceil(std::clamp(q, 0.0, 1.0) * static_cast<double>(v.size()));
  return v[static_cast<size_t>(std::max(rank, 1.0)) - 1];
}

double layer_share(const std::vector<int32_t>& v, int32_t x) {
  if (v.empty()) return 0;
  return static_cast<double>(std::count(v.begin(), v.end(), x)) / static_cast<double>(v.size());
}

}  // namespace agentkv
