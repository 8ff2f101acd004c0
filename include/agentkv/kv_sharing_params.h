// Per-request parameters of the KV-sharing schemes that have any (segment
// reuse: naive, epic, cacheblend, sparsex, relay). Unset fields take the server's defaults;
// a field on a scheme that does not use it is an error (docs/usage.md, "Segment reuse").
#pragma once

#include <cstdint>
#include <optional>

namespace agentkv {

struct KvSharingParams {
  std::optional<double> ratio;                // cacheblend, sparsex: share of reused tokens recomputed, [0, 1]
  std::optional<int32_t> recompute_tokens;    // epic: first N tokens of each reused segment, >= 0
  std::optional<int32_t> check_layer;         // cacheblend: the layer that selects, >= 1
  std::optional<int32_t> boundary_layer;      // sparsex: dense below, selects at it (the paper's l*), >= 0
  std::optional<int32_t> overflow_blocks;     // sparsex: KV blocks added on each side of a run not reused, >= 0
  std::optional<int32_t> tail_tokens;         // sparsex: last reused tokens recomputed when the prompt ends in one, >= 0
  std::optional<int32_t> min_segment_tokens;  // every reuse scheme: shortest segment reused, >= 1
  // relay (RelayCaching, SCHEMES.md §3): reused tokens recompute layers
  // [l_start, l_end) from their hidden-state snapshot, all of them up to
  // l_det, the selected ones above; l_start == l_end is direct reuse.
  std::optional<int32_t> l_start;
  std::optional<int32_t> l_det;
  std::optional<int32_t> l_end;
  std::optional<double> dev_threshold;        // relay: V deviation >= this x its mean selects, >= 0 (tau_dev)
  std::optional<double> influence_threshold;  // relay: influence >= this x its mean selects, >= 0 (tau_inf)
  std::optional<int32_t> suffix_tokens;       // relay: last reused tokens of each segment always selected, >= 0

  bool empty() const {
    return !ratio && !recompute_tokens && !check_layer && !boundary_layer && !overflow_blocks && !tail_tokens &&
           !min_segment_tokens && !l_start && !l_det && !l_end && !dev_threshold && !influence_threshold &&
           !suffix_tokens;
  }

  // This request's parameters, with each unset one taken from `defaults`.
  KvSharingParams with_defaults(const KvSharingParams& defaults) const {
    KvSharingParams p = *this;
    auto fill = [](auto& field, const auto& from) {
      if (!field) field = from;
    };
    fill(p.ratio, defaults.ratio);
    fill(p.recompute_tokens, defaults.recompute_tokens);
    fill(p.check_layer, defaults.check_layer);
    fill(p.boundary_layer, defaults.boundary_layer);
    fill(p.overflow_blocks, defaults.overflow_blocks);
    fill(p.tail_tokens, defaults.tail_tokens);
    fill(p.min_segment_tokens, defaults.min_segment_tokens);
    fill(p.l_start, defaults.l_start);
    fill(p.l_det, defaults.l_det);
    fill(p.l_end, defaults.l_end);
    fill(p.dev_threshold, defaults.dev_threshold);
    fill(p.influence_threshold, defaults.influence_threshold);
    fill(p.suffix_tokens, defaults.suffix_tokens);
    return p;
  }
};

}  // namespace agentkv
