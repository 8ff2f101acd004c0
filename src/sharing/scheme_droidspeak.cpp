// `droidspeak` (DroidSpeak, as LRAgent runs it: docs/scheme_algorithms.md §1.3): one K/V
// cache for every agent, as `full`, but an agent recomputes the K/V of its
// critical layers for the tokens another agent wrote, overwriting the shared
// entries (LRAgent App. D.6), and reuses the other layers' K/V. Its hidden
// states for those tokens run from the first critical layer on, from the
// snapshot the engine keeps there (the state of the agent that processed
// the token: DroidSpeak's E cache) when the request's first critical layer
// is the server's, else from layer 0. The critical set is a
// parameter; `agentkv profile-droidspeak` measures it for a model. Exact
// limit: every layer critical gives `none`'s logits for an agent's tokens.
#include <algorithm>

#include "agentkv/serving.h"
#include "sharing/droidspeak_profile.h"
#include "sharing/scheme.h"
#include "util/file_id.h"

namespace agentkv {

namespace {

class SchemeDroidspeak final : public SharingScheme {
 public:
  const char* name() const override { return "droidspeak"; }
  Result<SeqSharing> plan(const Adapter* adapter, std::span<const int32_t> prompt) const override {
    return plan_request(PlanContext{adapter, prompt, nullptr, 0});
  }
  Result<SeqSharing> plan_request(const PlanContext& c) const override {
    AKV_ASSIGN_OR_RETURN(SeqSharing s, sharing_plan_none(c.adapter, c.prompt));
    s.scheme = name();
    if (c.adapter != nullptr && c.adapter->kind != AdapterKind::kLora) return s;
    s.lineage_from = kNever;
    s.shared_lineage = "droidspeak";
    if (c.params != nullptr && c.params->critical_layers) {
      s.redo_layers = *c.params->critical_layers;
      std::sort(s.redo_layers.begin(), s.redo_layers.end());
    }
    return s;
  }
  Status check_params(const KvSharingParams& p) const override {
    KvSharingParams rest = p;
    rest.critical_layers.reset();
    if (!rest.empty()) {
      return make_error(ErrorCode::kInvalidArgument,
                        "kv_sharing scheme 'droidspeak' takes only 'critical_layers'");
    }
    if (!p.critical_layers) return Status::ok();
    std::vector<int32_t> v = *p.critical_layers;
    std::sort(v.begin(), v.end());
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] < 0)
        return make_error(ErrorCode::kInvalidArgument, "kv_sharing critical_layers must be >= 0, got ", v[i]);
      if (i > 0 && v[i] == v[i - 1]) {
        return make_error(ErrorCode::kInvalidArgument, "kv_sharing critical_layers lists layer ", v[i],
                          " twice");
      }
    }
    return Status::ok();
  }
  Status check_model(const KvSharingParams& p, int32_t n_layers) const override {
    if (!p.critical_layers) {
      return make_error(ErrorCode::kInvalidArgument,
                        "kv_sharing 'droidspeak' needs critical_layers: pass them, or start the server with "
                        "--droidspeak-profile (agentkv profile-droidspeak writes one)");
    }
    for (int32_t l : *p.critical_layers) {
      if (l >= n_layers) {
        return make_error(ErrorCode::kInvalidArgument, "kv_sharing critical_layers: layer ", l,
                          " is out of range (the model has ", n_layers, " layers)");
      }
    }
    return Status::ok();
  }
  // The server's critical layers from --droidspeak-profile (unless given),
  // checked; the owner tag of every slot, and the hidden state entering the
  // first critical layer where snapshots are kept.
  Status configure_server(const ServerSchemeContext& c, KvSharingParams* d,
                          KvComponentRegistry* components) const override {
    const ServingOptions& o = *c.opts;
    if (!o.droidspeak_profile.empty() && !d->critical_layers) {
      AKV_ASSIGN_OR_RETURN(std::string model_id, file_content_id(o.model_path));
      AKV_ASSIGN_OR_RETURN(DroidspeakProfile dp,
                           load_droidspeak_profile(o.droidspeak_profile, model_id, c.n_layers));
      d->critical_layers = dp.critical_layers;
    }
    if (d->critical_layers) {
      KvSharingParams only;
      only.critical_layers = d->critical_layers;
      AKV_RETURN_IF_ERROR(check_params(only).with_context("--droidspeak-layers"));
      AKV_RETURN_IF_ERROR(check_model(only, c.n_layers).with_context("--droidspeak-layers"));
    }
    AKV_RETURN_IF_ERROR(components->declare({ComponentRole::kOwnerTags, 1}));
    if (o.droidspeak_snapshots && d->critical_layers && !d->critical_layers->empty()) {
      const int32_t first = *std::min_element(d->critical_layers->begin(), d->critical_layers->end());
      if (first > 0)
        AKV_RETURN_IF_ERROR(components->declare({ComponentRole::kOwnerHidden, c.d_model, first}));
    }
    return Status::ok();
  }
  bool reads_lineage(std::optional<AdapterKind> kind, std::string_view tag) const override {
    return tag == "droidspeak" && shared_kv_reader(kind);
  }
};

}  // namespace

const SharingScheme* sharing_scheme_droidspeak_instance() {
  static const SchemeDroidspeak s;
  return &s;
}

}  // namespace agentkv
