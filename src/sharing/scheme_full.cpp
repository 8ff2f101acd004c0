// `full` (FullShared, LRAgent's fastest baseline, docs/scheme_algorithms.md §1.2): one K/V
// cache for every agent. Whichever agent first computes a token's K/V writes
// it, V with that agent's LoRA term in it, and every other agent reuses it as
// it is, so an agent prefills only tokens no agent has computed. Blocks carry
// the shared lineage tag "full", never the base's: a base-model request under
// an exact scheme never reads what an adapter wrote here.
#include "sharing/scheme.h"

namespace agentkv {

namespace {

class SchemeFull final : public SharingScheme {
 public:
  const char* name() const override { return "full"; }
  Result<SeqSharing> plan(const Adapter* adapter, std::span<const int32_t> prompt) const override {
    AKV_ASSIGN_OR_RETURN(SeqSharing s, sharing_plan_none(adapter, prompt));
    s.scheme = name();
    // aLoRA and ICaRus adapters keep their own exact sharing rules.
    if (adapter != nullptr && adapter->kind != AdapterKind::kLora) return s;
    s.lineage_from = kNever;
    s.shared_lineage = "full";
    return s;
  }
  bool reads_lineage(std::optional<AdapterKind> kind, std::string_view tag) const override {
    return tag == "full" && shared_kv_reader(kind);
  }
};

}  // namespace

const SharingScheme* sharing_scheme_full_instance() {
  static const SchemeFull s;
  return &s;
}

}  // namespace agentkv
