// Loads a llama.cpp GGUF LoRA (convert_lora_to_gguf.py's output) into an
// Adapter for a GGUF base:
//   general.type = "adapter", adapter.type = "lora", general.architecture =
//   the base's, adapter.lora.alpha (f32; absent or 0 means scale 1, as in
//   llama.cpp's llama_adapter_lora_weight::get_scale), optional
//   adapter.alora.invocation_tokens (array of u32, i32 accepted too);
//   tensors blk.{i}.{attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down}.weight.lora_a
//   with ne = [d_in, rank] and .lora_b with ne = [rank, d_out] -- in row-major
//   terms PEFT's A (rank, d_in) and B (d_out, rank). Any dequantizable type.
// The converter already permuted the q/k rows of B, so nothing is permuted here.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "adapter/adapter.h"
#include "model/model_spec.h"
#include "util/status.h"

namespace agentkv {

Result<Adapter> load_gguf_lora_adapter(const std::string& path, const ModelSpec& spec, int32_t n_vocab,
                                       std::optional<AdapterKind> kind_override = std::nullopt);

// The same from bytes (tests); `source` names it in messages.
Result<Adapter> load_gguf_lora_adapter_bytes(std::span<const uint8_t> bytes, const ModelSpec& spec, int32_t n_vocab,
                                             std::optional<AdapterKind> kind_override, const std::string& source);

}  // namespace agentkv
