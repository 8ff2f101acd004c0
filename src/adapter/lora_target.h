// The seven LoRA target modules: their names in the PEFT (HF) and llama.cpp
// GGUF worlds, and the shape of the base projection each one adapts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "adapter/adapter.h"
#include "model/model_spec.h"

namespace agentkv {

inline constexpr LoraTarget kAllLoraTargets[kLoraTargetCount] = {
    LoraTarget::kQ, LoraTarget::kK, LoraTarget::kV, LoraTarget::kO, LoraTarget::kGate, LoraTarget::kUp,
    LoraTarget::kDown};

const char* lora_target_peft_name(LoraTarget t);    // "q_proj"
const char* lora_target_hf_parent(LoraTarget t);    // "self_attn" or "mlp"
const char* lora_target_gguf_name(LoraTarget t);    // "attn_q"
const char* lora_target_short_name(LoraTarget t);   // "q" (synth-adapter --targets)
std::optional<LoraTarget> lora_target_from_peft(std::string_view name);
std::optional<LoraTarget> lora_target_from_gguf(std::string_view name);
std::optional<LoraTarget> lora_target_from_short(std::string_view name);

// The base projection's weight shape (d_out, d_in), as in LayerWeights.
struct LoraBaseShape {
  int64_t d_out = 0;
  int64_t d_in = 0;
};
LoraBaseShape lora_base_shape(const ModelSpec& spec, LoraTarget t);

// The tensor name PEFT's save_pretrained writes ("base_model.model.model.
// layers.3.self_attn.q_proj.lora_A.weight"); `b` picks lora_B.
std::string peft_tensor_name(int32_t layer, LoraTarget t, bool b);

}  // namespace agentkv
