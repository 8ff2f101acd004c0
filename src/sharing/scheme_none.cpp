// `none`: the baseline of every paper (vLLM/SGLang multi-LoRA). Each adapter
// keeps its own KV: its blocks carry its lineage from the first token, so it
// shares only with itself (prefix caching within one adapter).
#include "sharing/scheme.h"

namespace agentkv {

int32_t find_last_occurrence(std::span<const int32_t> hay, std::span<const int32_t> needle) {
  if (needle.empty() || needle.size() > hay.size()) return -1;
  for (size_t start = hay.size() - needle.size() + 1; start-- > 0;) {
    bool eq = true;
    for (size_t j = 0; j < needle.size() && eq; ++j) eq = hay[start + j] == needle[j];
    if (eq) return static_cast<int32_t>(start);
  }
  return -1;
}

Result<SeqSharing> sharing_plan_none(const Adapter* adapter, std::span<const int32_t> prompt) {
  SeqSharing s;
  s.adapter = adapter;
  if (adapter == nullptr) return s;  // base: base weights, base lineage
  s.lineage_from = 0;
  switch (adapter->kind) {
    case AdapterKind::kLora:
      s.weights_from = 0;
      break;
    case AdapterKind::kAlora: {
      // aLoRA (paper 004, Sec. 2.3): the adapter's weights apply from the
      // last occurrence of the invocation sequence on; before it the model is
      // the base, whatever the scheme.
      const int32_t at = find_last_occurrence(prompt, adapter->invocation_tokens);
      if (at < 0) {
        return make_error(ErrorCode::kInvalidArgument, "the prompt does not contain the invocation sequence of aLoRA adapter '",
                          adapter->name, "' (", adapter->invocation_tokens.size(),
                          " tokens); end the prompt with it to activate the adapter");
      }
      s.weights_from = at;
      break;
    }
    case AdapterKind::kIcarus:
      // ICaRus (paper 001, Sec. 3.3): KV always comes from the base encoder;
      // the adapter is a decoder row. Under `none` the encoder KV still carries
      // the adapter's lineage: each adapter runs its own encoding pass.
      s.weights_from = kNever;
      s.decoder_row = true;
      break;
  }
  return s;
}

namespace {

class SchemeNone final : public SharingScheme {
 public:
  const char* name() const override { return "none"; }
  Result<SeqSharing> plan(const Adapter* adapter, std::span<const int32_t> prompt) const override {
    return sharing_plan_none(adapter, prompt);
  }
};

}  // namespace

const SharingScheme* sharing_scheme_none_instance() {
  static const SchemeNone s;
  return &s;
}

}  // namespace agentkv
