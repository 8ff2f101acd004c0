#include "sharing/scheme_reuse_common.h"

namespace agentkv {

Result<SeqSharing> reuse_plan(const char* scheme, const Adapter* adapter, std::span<const int32_t> prompt) {
  AKV_ASSIGN_OR_RETURN(SeqSharing s, sharing_plan_none(adapter, prompt));
  s.scheme = scheme;
  return s;
}

Status check_reuse_params(const char* scheme, const ReuseParamSet& takes, const KvSharingParams& p) {
  auto not_taken = [&](const char* field) {
    return make_error(ErrorCode::kInvalidArgument, "kv_sharing scheme '", scheme, "' takes no '", field, "' parameter");
  };
  if (p.ratio) {
    if (!takes.ratio) return not_taken("ratio");
    if (!(*p.ratio >= 0.0 && *p.ratio <= 1.0)) {
      return make_error(ErrorCode::kInvalidArgument, "kv_sharing ratio must be in [0, 1], got ", *p.ratio);
    }
  }
  if (p.recompute_tokens) {
    if (!takes.recompute_tokens) return not_taken("recompute_tokens");
    if (*p.recompute_tokens < 0) {
      return make_error(ErrorCode::kInvalidArgument, "kv_sharing recompute_tokens must be >= 0, got ", *p.recompute_tokens);
    }
  }
  if (p.check_layer) {
    if (!takes.check_layer) return not_taken("check_layer");
    if (*p.check_layer < 1) {
      return make_error(ErrorCode::kInvalidArgument, "kv_sharing check_layer must be >= 1 (layer 0 is always dense), got ",
                        *p.check_layer);
    }
  }
  const std::pair<const char*, std::pair<bool, const std::optional<int32_t>*>> non_negative[] = {
      {"boundary_layer", {takes.boundary_layer, &p.boundary_layer}},
      {"overflow_blocks", {takes.overflow_blocks, &p.overflow_blocks}},
      {"tail_tokens", {takes.tail_tokens, &p.tail_tokens}},
      {"l_start", {takes.relay, &p.l_start}},
      {"l_det", {takes.relay, &p.l_det}},
      {"l_end", {takes.relay, &p.l_end}},
      {"suffix_tokens", {takes.relay, &p.suffix_tokens}},
      {"prefix_tokens", {takes.relay, &p.prefix_tokens}}};
  for (const auto& [field, taken_value] : non_negative) {
    const auto& [taken, value] = taken_value;
    if (!*value) continue;
    if (!taken) return not_taken(field);
    if (**value < 0) {
      return make_error(ErrorCode::kInvalidArgument, "kv_sharing ", field, " must be >= 0, got ", **value);
    }
  }
  const std::pair<const char*, const std::optional<double>*> thresholds[] = {
      {"dev_threshold", &p.dev_threshold}, {"influence_threshold", &p.influence_threshold}};
  for (const auto& [field, value] : thresholds) {
    if (!*value) continue;
    if (!takes.relay) return not_taken(field);
    if (!(**value >= 0.0 && **value < 1e30)) {
      return make_error(ErrorCode::kInvalidArgument, "kv_sharing ", field, " must be a number >= 0, got ", **value);
    }
  }
  if (p.critical_layers) return not_taken("critical_layers");
  if (p.min_segment_tokens && *p.min_segment_tokens < 1) {
    return make_error(ErrorCode::kInvalidArgument, "kv_sharing min_segment_tokens must be >= 1, got ",
                      *p.min_segment_tokens);
  }
  return Status::ok();
}

}  // namespace agentkv
