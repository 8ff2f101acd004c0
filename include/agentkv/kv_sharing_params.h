// Per-request parameters of the KV-sharing schemes that have any (segment
// reuse: naive, epic, cacheblend, sparsex). Unset fields take the server's defaults;
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

  bool empty() const {
    return !ratio && !recompute_tokens && !check_layer && !boundary_layer && !overflow_blocks && !tail_tokens &&
           !min_segment_tokens;
  }
};

}  // namespace agentkv
