// An adapter ("agent") on the base model: LoRA matrices per layer and target
// module, in the compute dtype, ready for the runner. Loaders (PEFT
// safetensors, llama.cpp GGUF LoRA) produce it; the registry owns it; the
// runner reads it. Kernels see only LoraView (backend.h).
//
// Layout follows PEFT: for a Linear y = x · W^T with W (d_out, d_in),
//   y += scale * (x · A^T) · B^T,   A (rank, d_in) = lora_A.weight,
//                                   B (d_out, rank) = lora_B.weight.
// B's rows are in the row order of the GGUF base weight: for llama/mistral
// files, whose converter permutes the q/k rows for adjacent-pair RoPE, the
// PEFT loader applies the same permutation to B of q_proj and k_proj.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace agentkv {

enum class AdapterKind {
  kLora,    // plain LoRA: every token runs with the adapter
  kAlora,   // Activated LoRA: adapter weights only from the invocation sequence on
  kIcarus,  // ICaRus logical decoder: reads the base model's KV, never writes KV
};

const char* adapter_kind_name(AdapterKind k);  // "lora", "alora", "icarus"

// Target modules, in a fixed order (indexes LoraLayer::m).
enum class LoraTarget : int32_t { kQ = 0, kK, kV, kO, kGate, kUp, kDown };
inline constexpr int32_t kLoraTargetCount = 7;

struct LoraMatrix {
  int32_t rank = 0;       // 0: this module has no adapter
  int64_t d_in = 0;
  int64_t d_out = 0;
  float scale = 0.0f;     // lora_alpha / rank (or / sqrt(rank) with use_rslora)
  std::vector<float> a;   // (rank, d_in)
  std::vector<float> b;   // (d_out, rank)

  bool empty() const { return rank == 0; }
};

struct LoraLayer {
  std::array<LoraMatrix, kLoraTargetCount> m;  // indexed by LoraTarget

  const LoraMatrix& at(LoraTarget t) const { return m[static_cast<int32_t>(t)]; }
  LoraMatrix& at(LoraTarget t) { return m[static_cast<int32_t>(t)]; }
};

struct Adapter {
  std::string name;      // the API model name it was registered under
  std::string id;        // hex content hash of the adapter files: its identity and KV lineage
  AdapterKind kind = AdapterKind::kLora;
  int32_t rank = 0;      // the config's r (modules may differ with a rank pattern)
  std::vector<int32_t> invocation_tokens;  // kAlora: the activation sequence (non-empty)
  std::vector<LoraLayer> layers;           // one per base layer
  std::string source;    // where it was loaded from, for messages
  // Hex hash of the v_proj lora_A of every layer (adapter_v_a_id): adapters
  // with bit-identical v_proj A form a shared-A group (LRAgent), whose LR
  // caches are interchangeable. "" when the adapter has no v_proj LoRA.
  std::string v_a_id;
};

}  // namespace agentkv
