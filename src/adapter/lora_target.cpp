#include "adapter/lora_target.h"

namespace agentkv {
namespace {

struct Row {
  LoraTarget t;
  const char* peft;
  const char* parent;
  const char* gguf;
  const char* short_name;
};

constexpr Row kRows[kLoraTargetCount] = {
    {LoraTarget::kQ, "q_proj", "self_attn", "attn_q", "q"},
    {LoraTarget::kK, "k_proj", "self_attn", "attn_k", "k"},
    {LoraTarget::kV, "v_proj", "self_attn", "attn_v", "v"},
    {LoraTarget::kO, "o_proj", "self_attn", "attn_output", "o"},
    {LoraTarget::kGate, "gate_proj", "mlp", "ffn_gate", "gate"},
    {LoraTarget::kUp, "up_proj", "mlp", "ffn_up", "up"},
    {LoraTarget::kDown, "down_proj", "mlp", "ffn_down", "down"},
};

const Row& row(LoraTarget t) { return kRows[static_cast<int32_t>(t)]; }

}  // namespace

const char* lora_target_peft_name(LoraTarget t) { return row(t).peft; }
const char* lora_target_hf_parent(LoraTarget t) { return row(t).parent; }
const char* lora_target_gguf_name(LoraTarget t) { return row(t).gguf; }
const char* lora_target_short_name(LoraTarget t) { return row(t).short_name; }

std::optional<LoraTarget> lora_target_from_peft(std::string_view name) {
  for (const Row& r : kRows)
    if (name == r.peft) return r.t;
  return std::nullopt;
}
std::optional<LoraTarget> lora_target_from_gguf(std::string_view name) {
  for (const Row& r : kRows)
    if (name == r.gguf) return r.t;
  return std::nullopt;
}
std::optional<LoraTarget> lora_target_from_short(std::string_view name) {
  for (const Row& r : kRows)
    if (name == r.short_name || name == r.peft) return r.t;
  return std::nullopt;
}

LoraBaseShape lora_base_shape(const ModelSpec& s, LoraTarget t) {
  switch (t) {
    case LoraTarget::kQ: return {s.q_dim(), s.d_model};
    case LoraTarget::kK:
    case LoraTarget::kV: return {s.kv_dim(), s.d_model};
    case LoraTarget::kO: return {s.d_model, s.q_dim()};
    case LoraTarget::kGate:
    case LoraTarget::kUp: return {s.ffn_dim, s.d_model};
    case LoraTarget::kDown: return {s.d_model, s.ffn_dim};
  }
  return {};
}

std::string peft_tensor_name(int32_t layer, LoraTarget t, bool b) {
  return "base_model.model.model.layers." + std::to_string(layer) + "." + lora_target_hf_parent(t) + "." +
         lora_target_peft_name(t) + (b ? ".lora_B.weight" : ".lora_A.weight");
}

}  // namespace agentkv
