// Per-request parameters of the KV-sharing schemes that have any (segment
// reuse: naive, epic, cacheblend). Unset fields take the server's defaults;
// a field on a scheme that does not use it is an error (docs/kv-sharing.md).
#pragma once

#include <cstdint>
#include <optional>

namespace agentkv {

struct KvSharingParams {
  std::optional<double> ratio;                // cacheblend: share of reused tokens recomputed, [0, 1]
  std::optional<int32_t> recompute_tokens;    // epic: first N tokens of each reused segment, >= 0
  std::optional<int32_t> check_layer;         // cacheblend: the layer that selects, >= 1
  std::optional<int32_t> min_segment_tokens;  // every reuse scheme: shortest segment reused, >= 1

  bool empty() const { return !ratio && !recompute_tokens && !check_layer && !min_segment_tokens; }
};

}  // namespace agentkv
