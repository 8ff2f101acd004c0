// LRAgent (paper 000, §3-4; docs/scheme_algorithms.md §1.2): each agent's cache is a base
// part, K and V_base = X·W_v, shared by every agent, and a low-rank part, the
// v_proj LoRA's X·A (r values per token and layer), in the LR cache.
// Attention reads V = V_base + s·(X·A)·B_j (Flash-LoRA-Attention).
//  - `lragent-base` (BaseShared): the LR cache is the agent's own (lineage:
//    the adapter's content id). An agent runs its own forward over every
//    token it has not seen ("LR prefill"); tokens whose base K/V is cached
//    keep it and only add their LR row.
//  - `lragent-baselr` (BaseLRShared): adapters whose v_proj A is bit for bit
//    the same (a shared-A group) share one LR cache (lineage: the A's id),
//    so an agent computes only tokens no agent of its group has; q, o and
//    the FFN LoRA run live with its own B. An adapter in no group keeps
//    BaseShared rules, and the request says so (usage, /metrics).
// The base K/V carries the shared tag "lragent", never the base's lineage:
// it was computed from another agent's hidden states.
//
// LoRA on k_proj is refused (paper App. D.1 would rebuild K before RoPE):
// the shared base K is the one thing every agent reads unchanged.
#include "agentkv/serving.h"
#include "sharing/scheme.h"

namespace agentkv {

namespace {

Result<SeqSharing> lragent_plan(const char* scheme, const PlanContext& c, bool shared_a) {
  AKV_ASSIGN_OR_RETURN(SeqSharing s, sharing_plan_none(c.adapter, c.prompt));
  s.scheme = scheme;
  const Adapter* a = c.adapter;
  // aLoRA and ICaRus adapters keep their own exact rules.
  if (a != nullptr && a->kind != AdapterKind::kLora) return s;
  s.lineage_from = kNever;
  s.shared_lineage = "lragent";
  if (a == nullptr) return s;  // the base model: base K/V, no LR part
  for (size_t l = 0; l < a->layers.size(); ++l) {
    if (!a->layers[l].at(LoraTarget::kK).empty()) {
      return make_error(ErrorCode::kInvalidArgument, "kv_sharing '", scheme, "' cannot serve adapter '",
                        a->name, "': it has a LoRA on k_proj (layer ", l,
                        "), and the LR schemes share the base K unchanged; serve it under none or full");
    }
  }
  if (a->v_a_id.empty()) return s;  // no v_proj LoRA: V is the base's, nothing to keep
  if (shared_a && c.shared_a_peers > 0) {
    s.lr_lineage = "lr-group:" + a->v_a_id;
  } else {
    s.lr_lineage = "lr-adapter:" + a->id;
    s.lr_fallback = shared_a;
  }
  return s;
}

// The LR cache's pool, at --lr-cache-rank (0: none, and the LR schemes then
// refuse adapters with a v_proj LoRA at admission). Both schemes declare the
// same pool: one LR cache serves them.
Status declare_lr_pool(const ServerSchemeContext& c, KvComponentRegistry* components) {
  const int32_t rank = c.opts->lr_cache_rank;
  if (rank < 0 || rank > 1024) {
    return make_error(ErrorCode::kInvalidArgument, "--lr-cache-rank must be in [0, 1024]");
  }
  if (rank == 0) return Status::ok();
  return components->declare_pool(PoolDecl{rank, kLrBlocksPerKvBlock});
}

class SchemeLragentBase final : public SharingScheme {
 public:
  const char* name() const override { return "lragent-base"; }
  Result<SeqSharing> plan(const Adapter* adapter, std::span<const int32_t> prompt) const override {
    return plan_request(PlanContext{adapter, prompt, nullptr, 0});
  }
  Result<SeqSharing> plan_request(const PlanContext& c) const override {
    return lragent_plan(name(), c, false);
  }
  bool reads_lineage(std::optional<AdapterKind> kind, std::string_view tag) const override {
    return tag == "lragent" && shared_kv_reader(kind);
  }
  Status configure_server(const ServerSchemeContext& c, KvSharingParams* defaults,
                          KvComponentRegistry* components) const override {
    (void)defaults;
    return declare_lr_pool(c, components);
  }
};

class SchemeLragentBaseLr final : public SharingScheme {
 public:
  const char* name() const override { return "lragent-baselr"; }
  Result<SeqSharing> plan(const Adapter* adapter, std::span<const int32_t> prompt) const override {
    return plan_request(PlanContext{adapter, prompt, nullptr, 0});
  }
  Result<SeqSharing> plan_request(const PlanContext& c) const override {
    return lragent_plan(name(), c, true);
  }
  bool reads_lineage(std::optional<AdapterKind> kind, std::string_view tag) const override {
    return tag == "lragent" && shared_kv_reader(kind);
  }
  Status configure_server(const ServerSchemeContext& c, KvSharingParams* defaults,
                          KvComponentRegistry* components) const override {
    (void)defaults;
    return declare_lr_pool(c, components);
  }
};

}  // namespace

const SharingScheme* sharing_scheme_lragent_base_instance() {
  static const SchemeLragentBase s;
  return &s;
}

const SharingScheme* sharing_scheme_lragent_baselr_instance() {
  static const SchemeLragentBaseLr s;
  return &s;
}

}  // namespace agentkv
