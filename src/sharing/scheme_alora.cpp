// `alora` (Activated LoRA, paper 004, Sec. 2.3 and 3): an aLoRA adapter's
// tokens before its invocation sequence run with the base weights, so their
// KV is the base model's and carries the base lineage: the adapter hits base
// blocks, and the base hits blocks the adapter computed before activation.
// Only blocks that end at or before the invocation start are base lineage;
// the block holding it mixes both and is the adapter's.
#include "sharing/scheme.h"

namespace agentkv {

namespace {

class SchemeAlora final : public SharingScheme {
 public:
  const char* name() const override { return "alora"; }
  Result<SeqSharing> plan(const Adapter* adapter, std::span<const int32_t> prompt) const override {
    AKV_ASSIGN_OR_RETURN(SeqSharing s, sharing_plan_none(adapter, prompt));
    if (adapter != nullptr && adapter->kind == AdapterKind::kAlora) {
      s.scheme = name();
      s.lineage_from = s.weights_from;
    }
    return s;
  }
  bool reads_lineage(std::optional<AdapterKind> kind, std::string_view tag) const override {
    return tag.empty() && kind == AdapterKind::kAlora;
  }
};

}  // namespace

const SharingScheme* sharing_scheme_alora_instance() {
  static const SchemeAlora s;
  return &s;
}

}  // namespace agentkv
