// Hyper-parameters of a Llama-family decoder, read from GGUF metadata.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "model/arch.h"
#include "util/status.h"

namespace agentkv {

enum class RopeScalingType { kNone, kLinear, kLlama3 };

struct ModelSpec {
  ArchInfo arch{};
  std::string name;          // general.name, for messages
  int32_t n_layers = 0;
  int32_t d_model = 0;       // embedding_length
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;      // attention.key_length, default d_model / n_heads
  int32_t ffn_dim = 0;       // feed_forward_length
  int32_t n_vocab = 0;       // rows of token_embd
  int32_t n_ctx_train = 0;   // context_length
  float norm_eps = 1e-5f;    // attention.layer_norm_rms_epsilon
  RopeStyle rope_style = RopeStyle::kNormal;
  int32_t rope_dim = 0;      // rope.dimension_count, default head_dim
  float rope_freq_base = 10000.0f;
  RopeScalingType rope_scaling = RopeScalingType::kNone;
  float rope_freq_scale = 1.0f;  // 1 / rope.scaling.factor for linear scaling
  bool has_rope_freqs = false;   // a rope_freqs.weight tensor (Llama 3 scaling) is present
  bool tied_embeddings = false;  // no output.weight: logits use token_embd
  // q·k scale: 1/sqrt(head_dim), except Gemma 3 27B's 1/sqrt(d_model / n_heads)
  // (llama.cpp's f_attention_scale).
  float attn_scale = 0.0f;
  float embed_scale = 1.0f;      // token embeddings are multiplied by it (gemma3: sqrt(d_model))
  // Sliding-window layers (gemma3): keys a local layer's query sees
  // (attention.sliding_window), which layers are local (sliding_window_pattern:
  // a period n, layer l local when l % n < n - 1, default 6; or one flag per
  // layer), and their RoPE base (rope.freq_base_swa, default 10000).
  int32_t sliding_window = 0;
  std::vector<uint8_t> layer_local;  // [n_layers], empty: no local layers
  float rope_freq_base_local = 10000.0f;
  float final_logit_softcap = 0.0f;  // final_logit_softcapping: logits c·tanh(z/c) when > 0

  int32_t q_dim() const { return n_heads * head_dim; }
  int32_t kv_dim() const { return n_kv_heads * head_dim; }
  bool is_local(int layer) const { return !layer_local.empty() && layer_local[layer] != 0; }
  // The attention window of a layer (AttentionPlan::window): 0 on global layers.
  int32_t layer_window(int layer) const { return is_local(layer) ? sliding_window : 0; }
};

// Reads and validates the hyper-parameters (positive sizes, heads dividing
// evenly, rope_dim even and <= head_dim). n_vocab and tied_embeddings come from
// the tensor table.
Result<ModelSpec> model_spec_from_gguf(const GgufFile& f);

}  // namespace agentkv
