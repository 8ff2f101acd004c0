// `icarus` (ICaRus, paper 001, Sec. 3.3 and App. B): only the base model (the
// logical encoder) writes KV, so every block of an ICaRus adapter's request
// is base lineage and shared with the base and every other ICaRus adapter.
// The adapter (the logical decoder) runs one extra row per sampled position:
// adapter weights, reading the encoder's KV at 0..p, writing none. In decode
// the encoder row and the decoder row of a token run in the same Step
// (Alg. 3), so the weights and the KV are read once for both.
#include "sharing/scheme.h"

namespace agentkv {

namespace {

class SchemeIcarus final : public SharingScheme {
 public:
  const char* name() const override { return "icarus"; }
  Result<SeqSharing> plan(const Adapter* adapter, std::span<const int32_t> prompt) const override {
    AKV_ASSIGN_OR_RETURN(SeqSharing s, sharing_plan_none(adapter, prompt));
    if (adapter != nullptr && adapter->kind == AdapterKind::kIcarus) {
      s.scheme = name();
      s.lineage_from = kNever;
    }
    return s;
  }
  bool reads_lineage(std::optional<AdapterKind> kind, std::string_view tag) const override {
    return tag.empty() && kind == AdapterKind::kIcarus;
  }
};

}  // namespace

const SharingScheme* sharing_scheme_icarus_instance() {
  static const SchemeIcarus s;
  return &s;
}

}  // namespace agentkv
