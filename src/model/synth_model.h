// Random-weight Llama-family models written as real GGUF files, for tests that
// need no download and for benchmarks at larger shapes.
#pragma once

#include <cstdint>
#include <string>

#include "format/gguf.h"
#include "util/status.h"

namespace agentkv {

struct SynthModelConfig {
  std::string arch = "llama";  // llama, mistral, qwen2, qwen3
  int32_t n_layers = 2;
  int32_t d_model = 64;
  int32_t n_heads = 4;
  int32_t n_kv_heads = 2;
  int32_t head_dim = 0;        // 0: d_model / n_heads
  int32_t ffn_dim = 128;
  int32_t n_vocab = 0;         // 0: the vocabulary file's size
  float rope_freq_base = 10000.0f;
  bool tied_embeddings = true;
  GgmlType type = GgmlType::kF32;  // matrices: f32, f16 or q8_0; norms stay f32
  uint64_t seed = 1;
  float init_std = 0.02f;
};

// Named shapes: "tiny", "smollm2-135m", "llama-1b" (Llama 3.2 1B), "llama-8b" (Llama 3.1 8B).
Result<SynthModelConfig> synth_model_preset(const std::string& name);

// Writes the model. Tokenizer keys (tokenizer.*) are copied from `vocab_from`,
// whose token count must be >= n_vocab when n_vocab is set.
Status synth_model_write(const SynthModelConfig& cfg, const GgufFile& vocab_from, const std::string& out_path);

}  // namespace agentkv
