// Architecture tables: which GGUF `general.architecture` values agentkv runs,
// and how each one differs from plain Llama. One row per architecture; the
// loader reads hyper-parameters under the architecture's key prefix.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "backend/backend.h"

namespace agentkv {

enum class Arch { kLlama, kMistral, kQwen2, kQwen3 };

struct ArchInfo {
  Arch arch;
  std::string_view name;     // general.architecture value, also the key prefix
  RopeStyle rope_style;      // llama.cpp's convert permutes llama/mistral q,k for the normal style
  bool qkv_bias;             // q, k, v projections carry a bias (qwen2)
  bool qk_norm;              // per-head RMSNorm of q and k before RoPE (qwen3)
};

std::optional<ArchInfo> arch_lookup(std::string_view name);

// Tensor names (llama.cpp's LLM_TENSOR_NAMES for these architectures).
namespace tn {
inline constexpr const char* kTokenEmbd = "token_embd.weight";
inline constexpr const char* kOutputNorm = "output_norm.weight";
inline constexpr const char* kOutput = "output.weight";
inline constexpr const char* kRopeFreqs = "rope_freqs.weight";
std::string blk(int layer, std::string_view suffix);  // "blk.3.attn_q.weight"
}  // namespace tn

}  // namespace agentkv
