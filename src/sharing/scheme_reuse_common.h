// What the three segment-reuse schemes share: none's rules for adapters
// (weights and lineage), their name on the decision, and the parameter
// checks (each scheme lists the parameters it takes).
#pragma once

#include "sharing/scheme.h"

namespace agentkv {

Result<SeqSharing> reuse_plan(const char* scheme, const Adapter* adapter, std::span<const int32_t> prompt);

// The base of the segment-reuse schemes: their plan() is reuse_plan().
class ReuseScheme : public SharingScheme {
 public:
  Result<SeqSharing> plan(const Adapter* adapter, std::span<const int32_t> prompt) const override {
    return reuse_plan(name(), adapter, prompt);
  }
};

// Which parameters a reuse scheme takes.
struct ReuseParamSet {
  bool ratio = false;
  bool recompute_tokens = false;
  bool check_layer = false;
  bool boundary_layer = false;
  bool overflow_blocks = false;
  bool tail_tokens = false;
  bool relay =
      false;  // l_start, l_det, l_end, dev_threshold, influence_threshold, suffix_tokens, prefix_tokens
};
Status check_reuse_params(const char* scheme, const ReuseParamSet& takes, const KvSharingParams& p);

}  // namespace agentkv
