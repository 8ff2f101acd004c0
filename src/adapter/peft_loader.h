// Loads a PEFT LoRA directory (adapter_config.json + adapter_model.safetensors,
// as peft's save_pretrained writes it) into an Adapter for a GGUF base.
//
// Tensor names are PEFT's, with the adapter name already removed by
// save_pretrained: "base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight"
// (lora_A (r, d_in), lora_B (d_out, r)). Any prefix before "layers.{i}." is
// accepted. For llama/mistral bases, whose GGUF q/k rows were permuted by
// llama.cpp's converter, B of q_proj and k_proj gets the same row permutation.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "adapter/adapter.h"
#include "model/model_spec.h"
#include "util/status.h"

namespace agentkv {

// n_vocab: the base vocabulary (embedding rows), for invocation tokens.
// kind_override: see resolve_adapter_kind; nullopt takes the kind from the
// config (alora when alora_invocation_tokens is set, else lora).
Result<Adapter> load_peft_adapter(const std::string& dir, const ModelSpec& spec, int32_t n_vocab,
                                  std::optional<AdapterKind> kind_override = std::nullopt);

// The same from bytes (tests); `source` names it in messages.
Result<Adapter> load_peft_adapter_bytes(std::string_view config_json, std::span<const uint8_t> safetensors,
                                        const ModelSpec& spec, int32_t n_vocab,
                                        std::optional<AdapterKind> kind_override, const std::string& source);

}  // namespace agentkv
