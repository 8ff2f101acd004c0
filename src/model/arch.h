// Architecture tables: which GGUF `general.architecture` values agentkv runs,
// and how each one differs from plain Llama. One row per architecture; the
// loader reads hyper-parameters under the architecture's key prefix.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "backend/backend.h"

namespace agentkv {

enum class Arch { kLlama, kMistral, kQwen2, kQwen3, kGemma3 };

// The gated FFN's activation: silu (SwiGLU) or tanh-approximated GELU (GeGLU).
enum class FfnAct { kSilu, kGeluTanh };

struct ArchInfo {
  Arch arch;
  std::string_view name;     // general.architecture value, also the key prefix
  RopeStyle rope_style;      // llama.cpp's convert permutes llama/mistral q,k for the normal style
  bool qkv_bias;             // q, k, v projections carry a bias (qwen2)
  bool qk_norm;              // per-head RMSNorm of q and k before RoPE (qwen3, gemma3)
  // Gemma 3: token embeddings times sqrt(d_model); an RMSNorm on the
  // attention output and on the FFN output before each joins the residual
  // (post_attention_norm, post_ffw_norm); GeGLU; sliding-window layers
  // (attention.sliding_window, one global layer in sliding_window_pattern).
  bool embed_scale = false;
  bool post_norms = false;
  FfnAct ffn_act = FfnAct::kSilu;
  bool sliding_window = false;
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
