#include "sharing/param_flags.h"

#include <algorithm>
#include <cstdint>
#include <sstream>

#include "sharing/scheme.h"

namespace agentkv {

namespace {

std::string with_default(const std::string& what, const std::string& dflt) {
  return what + " (default " + dflt + ")";
}

// A default as the help shows it: 0.15, 1.5, 64.
std::string num(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

constexpr double kBig = double{1 << 30};

}  // namespace

const std::vector<KvSharingFlag>& kv_sharing_flags() {
  static const std::vector<KvSharingFlag> flags = {
      {"ratio", "--reuse-ratio", 0, 1,
       with_default("cacheblend, sparsex: share of reused tokens recomputed", num(kSparsexDefaultRatio))},
      {"recompute_tokens", "--reuse-recompute-tokens", 0, kBig,
       with_default("epic: leading tokens of each reused segment recomputed",
                    num(kEpicDefaultRecomputeTokens))},
      {"check_layer", "--reuse-check-layer", 1, double{1 << 20},
       with_default("cacheblend: the layer that selects the tokens to recompute",
                    num(kCacheblendDefaultCheckLayer))},
      {"boundary_layer", "--reuse-boundary-layer", 0, double{1 << 20},
       with_default(
           "sparsex: layers below it run densely, it selects the tokens to recompute (the paper's l*, 5 "
           "for SmolLM2; 0 is SparseX without the hybrid boundary)",
           num(kSparsexDefaultBoundaryLayer))},
      {"overflow_blocks", "--reuse-overflow-blocks", 0, double{1 << 20},
       with_default("sparsex: KV blocks of reused tokens recomputed on each side of new text",
                    num(kSparsexDefaultOverflowBlocks))},
      {"tail_tokens", "--reuse-tail-tokens", 0, kBig,
       with_default("sparsex: last reused tokens recomputed when the prompt ends in reused text",
                    num(kSparsexDefaultTailTokens))},
      {"min_segment_tokens", "--reuse-min-segment-tokens", 1, kBig,
       with_default("segment reuse: shortest cached run reused, in tokens", "two KV blocks")},
      {"l_start", "--relay-l-start", 0, double{1 << 20},
       with_default(
           "relay: first layer of the recomputed band; reused tokens resume there from their hidden state",
           "--relay-profile's")},
      {"l_det", "--relay-l-det", 0, double{1 << 20},
       with_default("relay: the layer that selects by V deviation", "--relay-profile's")},
      {"l_end", "--relay-l-end", 0, double{1 << 20},
       with_default("relay: the band's end; layers from it on keep the copied K/V", "--relay-profile's")},
      {"dev_threshold", "--relay-dev-threshold", 0, 1e6,
       with_default(
           "relay: a reused token whose V deviation at l_det is >= this x the mean is recomputed up to l_end",
           num(kRelayDefaultDevThreshold))},
      {"influence_threshold", "--relay-influence-threshold", 0, 1e6,
       with_default("relay: the same by influence score", num(kRelayDefaultInfluenceThreshold))},
      {"suffix_tokens", "--relay-suffix-tokens", 0, kBig,
       with_default("relay: last reused tokens of each segment always recomputed",
                    num(kRelayDefaultSuffixTokens))},
      {"prefix_tokens", "--relay-prefix-tokens", 0, kBig,
       with_default("relay: first reused tokens of each segment recomputed in every layer, as epic's", "0")},
      {"critical_layers", "--droidspeak-layers", 0, 9999,
       "droidspeak: the default critical layers, comma-separated, e.g. 0,3,7 (profiles/*.droidspeak.json has "
       "a "
       "model's)"},
  };
  return flags;
}

bool parse_layer_list(const std::string& text, int32_t hi, std::vector<int32_t>* out) {
  std::vector<int32_t> layers;
  for (size_t at = 0; at <= text.size();) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string x = text.substr(at, comma - at);
    if (x.empty() || x.size() > 4 || x.find_first_not_of("0123456789") != std::string::npos) return false;
    const int32_t v = std::stoi(x);
    if (v > hi) return false;
    layers.push_back(v);
    at = comma + 1;
  }
  *out = std::move(layers);
  return true;
}

}  // namespace agentkv
