// adapter_config.json of a PEFT LoRA (peft.LoraConfig as save_pretrained
// writes it). Only what changes the matrices or their scale is read; every
// option agentkv cannot honour is an error rather than silently ignored.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "adapter/adapter.h"
#include "util/status.h"

namespace agentkv {

struct PeftLoraConfig {
  int32_t r = 0;
  double lora_alpha = 8;  // PEFT's default
  bool use_rslora = false;
  std::array<bool, kLoraTargetCount> targets{};  // indexed by LoraTarget
  // Per-module overrides, in file order (PEFT takes the first key that
  // matches). Keys are plain module names matched as a dotted suffix of
  // "model.layers.{i}.self_attn.q_proj"; regex keys are rejected.
  std::vector<std::pair<std::string, int32_t>> rank_pattern;
  std::vector<std::pair<std::string, double>> alpha_pattern;
  std::optional<std::vector<int32_t>> layers_to_transform;  // nullopt: every layer
  std::vector<int64_t> invocation_tokens;                   // alora_invocation_tokens; empty: plain LoRA

  int32_t rank_for(int32_t layer, LoraTarget t) const;
  double alpha_for(int32_t layer, LoraTarget t) const;
  bool transforms_layer(int32_t layer) const;
};

Result<PeftLoraConfig> peft_config_parse(std::string_view json_text);

}  // namespace agentkv
