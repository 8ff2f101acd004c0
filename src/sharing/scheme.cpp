#include "sharing/scheme.h"

namespace agentkv {

const SharingScheme* sharing_scheme_none_instance();
const SharingScheme* sharing_scheme_alora_instance();
const SharingScheme* sharing_scheme_icarus_instance();
const SharingScheme* sharing_scheme_naive_instance();
const SharingScheme* sharing_scheme_epic_instance();
const SharingScheme* sharing_scheme_cacheblend_instance();
const SharingScheme* sharing_scheme_sparsex_instance();
const SharingScheme* sharing_scheme_relay_instance();
const SharingScheme* sharing_scheme_full_instance();
const SharingScheme* sharing_scheme_droidspeak_instance();
const SharingScheme* sharing_scheme_lragent_base_instance();
const SharingScheme* sharing_scheme_lragent_baselr_instance();

const SharingScheme* sharing_scheme_single(std::string_view name);

namespace {
constexpr const char* kNames[] = {"none",    "alora", "icarus",     "naive",        "epic",          "cacheblend",
                                  "sparsex", "relay", "full", "droidspeak", "lragent-base", "lragent-baselr"};
}  // namespace

std::span<const char* const> sharing_scheme_names() { return kNames; }

std::string sharing_scheme_list() {
  std::string t;
  for (const char* n : kNames) {
    if (!t.empty()) t += ", ";
    t += n;
  }
  return t + "; or alora or icarus with a segment-reuse scheme, as alora+sparsex";
}

Result<const SharingScheme*> sharing_composed_find(std::string_view a, std::string_view b);

Result<const SharingScheme*> sharing_scheme_find(std::string_view name) {
  const size_t plus = name.find('+');
  if (plus != std::string_view::npos)
    return sharing_composed_find(name.substr(0, plus), name.substr(plus + 1));
  if (const SharingScheme* s = sharing_scheme_single(name)) return s;
  return make_error(ErrorCode::kInvalidArgument, "unknown kv_sharing '", name, "' (use ",
                    sharing_scheme_list(), ")");
}

const SharingScheme* sharing_scheme_get(std::string_view name) {
  Result<const SharingScheme*> s = sharing_scheme_find(name);
  return s.is_ok() ? s.value() : nullptr;
}

const SharingScheme* sharing_scheme_single(std::string_view name) {
  if (name == "none") return sharing_scheme_none_instance();
  if (name == "alora") return sharing_scheme_alora_instance();
  if (name == "icarus") return sharing_scheme_icarus_instance();
  if (name == "naive") return sharing_scheme_naive_instance();
  if (name == "epic") return sharing_scheme_epic_instance();
  if (name == "cacheblend") return sharing_scheme_cacheblend_instance();
  if (name == "sparsex") return sharing_scheme_sparsex_instance();
  if (name == "relay") return sharing_scheme_relay_instance();
  if (name == "full") return sharing_scheme_full_instance();
  if (name == "droidspeak") return sharing_scheme_droidspeak_instance();
  if (name == "lragent-base") return sharing_scheme_lragent_base_instance();
  if (name == "lragent-baselr") return sharing_scheme_lragent_baselr_instance();
  return nullptr;
}

Status SharingScheme::check_params(const KvSharingParams& p) const {
  if (p.empty()) return Status::ok();
  return make_error(ErrorCode::kInvalidArgument, "kv_sharing scheme '", name(),
                    "' takes no parameters (they belong to the segment-reuse schemes naive, epic, cacheblend, "
                    "sparsex and relay, and to droidspeak: docs/usage.md, \"Segment reuse\")");
}

Result<std::unique_ptr<SeqPlanner>> SharingScheme::admit(const PlanContext& c) const {
  AKV_ASSIGN_OR_RETURN(SeqSharing s, plan_request(c));
  std::unique_ptr<SeqPlanner> planner = make_planner(*c.params);
  planner->set_sharing(std::move(s));
  if (!c.segment_reuse) planner->stop_reuse();
  return planner;
}

}  // namespace agentkv
