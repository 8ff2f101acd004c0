// Random-weight Llama-family (and Gemma 3) models written as real GGUF files,
// for tests that need no download and for benchmarks at larger shapes. Gemma
// 3's norms are 1 + noise (the file's convention: llama.cpp's converter adds
// the 1), so each norm's weights matter to the result.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "format/gguf.h"
#include "util/status.h"

namespace agentkv {

struct SynthModelConfig {
  std::string arch = "llama";  // llama, mistral, qwen2, qwen3, gemma3
  int32_t n_layers = 2;
  int32_t d_model = 64;
  int32_t n_heads = 4;
  int32_t n_kv_heads = 2;
  int32_t head_dim = 0;        // 0: d_model / n_heads
  int32_t ffn_dim = 128;
  int32_t n_vocab = 0;         // 0: the vocabulary file's size
  float rope_freq_base = 10000.0f;
  // gemma3 only: attention.sliding_window (0: every layer global), its
  // sliding_window_pattern period (0: not written, the reader's default 6),
  // and rope.freq_base_swa (0: not written, default 10000).
  int32_t sliding_window = 0;
  int32_t swa_pattern = 0;
  float rope_freq_base_local = 0.0f;
  bool tied_embeddings = true;
  // Matrices: f32, f16, q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K or q6_K
  // (see synth_matrix_type); norms and biases stay f32.
  GgmlType type = GgmlType::kF32;
  uint64_t seed = 1;
  float init_std = 0.02f;
};

// Named shapes: "tiny", "smollm2-135m", "llama-1b" (Llama 3.2 1B), "llama-8b" (Llama 3.1 8B).
Result<SynthModelConfig> synth_model_preset(const std::string& name);

// The type a matrix whose rows hold k values is written in: `requested`,
// except that a k-quant whose 256-value super-blocks do not divide k falls
// back as llama-quantize does (q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0), and
// to f16 when 32 does not divide k either. Other block types are never
// replaced: a k they do not divide is synth_model_write's error.
GgmlType synth_matrix_type(GgmlType requested, int64_t k);

// Writes the model. Tokenizer keys (tokenizer.*) are copied from `vocab_from`,
// whose token count must be >= n_vocab when n_vocab is set. With
// `matrix_types`, it receives how many matrices were written in each type.
Status synth_model_write(const SynthModelConfig& cfg, const GgufFile& vocab_from, const std::string& out_path,
                         std::map<GgmlType, int>* matrix_types = nullptr);

}  // namespace agentkv
