// RelayCaching's offline layer profile (paper §4.2, App. B.1; docs/scheme_algorithms.md
// §3.2): from per-token V deviations between an upstream agent's decode-phase
// K/V and the full prefill of a downstream prompt, the band of layers the
// relay scheme recomputes, [l_start, l_end), and its detection layer l_det.
// Pure arithmetic plus the JSON file the server loads (--relay-profile);
// `agentkv profile-relay` measures the deviations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"

namespace agentkv {

// The paper's defaults (Table 4).
struct RelayProfileRules {
  double tau = 0.99;          // tau_st: similarity a layer needs to count as unchanged
  int32_t tail_layers = 5;    // T: the last layers set the recovered baseline
  double lambda = 2.0;        // a stable layer moves less than lambda x sigma_last
  int32_t stable_layers = 2;  // C: consecutive stable layers after l_end
  // Readings of the rules where the paper leaves a case open (both bind on
  // SmolLM2; docs/usage.md, "profile-relay"):
  //   det_rule "flip" (literal): l_det follows the first layer where alpha
  //     turns from positive to negative; "onset": the first layer where
  //     alpha is negative, the onset of deceleration. They differ only
  //     when alpha is negative before it is ever positive.
  //   end_rule "literal": the dip is the least similar layer from l_start
  //     on; "before-tail": the least similar before the last T layers,
  //     which set the recovered baseline. They differ only when the
  //     minimum lies in the tail (then "literal" finds no recovery: L).
  std::string det_rule = "flip";
  std::string end_rule = "literal";
};

// One calibration sample: d[layer][token] = 1 - mean over KV heads of
// cos(v_decode, v_prefill) for each reused token.
using DeviationSample = std::vector<std::vector<float>>;

struct RelayProfile {
  std::string model_id;    // model_content_id of the GGUF profiled
  std::string model_name;  // for messages
  int32_t n_layers = 0;
  int32_t l_start = 0, l_det = 0, l_end = 0;
  std::vector<double> similarity;  // s_l = mean over tokens (and samples) of 1 - d
  std::vector<double> rho;         // rho_l, Spearman(d_l, d_{l-1}) averaged over samples; NaN where undefined
  RelayProfileRules rules;
  int32_t samples = 0;
  int64_t tokens = 0;              // reused tokens measured, all samples
  uint64_t seed = 0;
};

// One calibration sample reduced to what the rules read, so that samples can
// be resampled (profile-relay --bootstrap) without their tokens.
struct RelaySampleStats {
  std::vector<double> sim_sum;  // per layer: the sum over tokens of 1 - d
  std::vector<double> rho;      // per layer: Spearman(d_l, d_{l-1}); NaN where undefined (and at layer 0)
  int64_t tokens = 0;
};

// A layer whose mean deviation is below this ranks no tokens: rho is
// undefined (NaN) next to it. f16 rounding alone gives about 1.5e-8.
inline constexpr double kRelayRankFloor = 1e-5;

// kInvalidArgument for a sample without layers or with ragged layers.
Result<RelaySampleStats> relay_sample_stats(const DeviationSample& s);

// The token deviation both the profiler and the relay scheme use: 1 - the
// mean over KV heads of cos(a_h, b_h) for one token's V ([kv_dim], heads of
// head_dim); a zero vector counts as no deviation.
float value_deviation(const float* a, const float* b, int64_t kv_dim, int64_t head_dim);

// Spearman rank correlation (average ranks for ties); NaN when either side
// is constant or shorter than 2.
double spearman(const std::vector<float>& a, const std::vector<float>& b);

// The layers from the paper's rules:
//   l_start: the last layer of the initial run with s_l >= tau (0 if s_0 < tau);
//   l_end: from argmin s, the first layer followed by C layers with s >= mu - sigma
//          of the last T layers and steps below lambda x sigma (L if none);
//   l_det: the first layer l* where alpha_l = rho_l - 2 rho_{l-1} + rho_{l-2}
//          turns from positive to negative, plus one;
// (or their other readings, RelayProfileRules) then clamped so that
// l_start <= l_det < l_end (documented in the profile).
// kInvalidArgument for no samples, samples of different layer counts, or an
// unknown rule.
Result<RelayProfile> compute_relay_profile(const std::vector<DeviationSample>& samples, const RelayProfileRules& rules);
Result<RelayProfile> relay_profile_from_stats(const std::vector<RelaySampleStats>& samples,
                                              const RelayProfileRules& rules);

Status save_relay_profile(const RelayProfile& p, const std::string& path);
// Loads and checks a profile for the model the engine runs: a clear error
// for a missing or corrupt file, another model (by content id), or layers
// out of range or order.
Result<RelayProfile> load_relay_profile(const std::string& path, const std::string& model_id, int32_t n_layers);

}  // namespace agentkv
