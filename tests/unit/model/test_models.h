// Builds small random-weight GGUF models in memory for tests that need no
// download (through synth_model_write, the same path as `agentkv synth-model`).
#pragma once

#include <cstdio>
#include <string>
#include <unistd.h>

#include "format/gguf.h"
#include "model/synth_model.h"

namespace agentkv::testing {

// A minimal byte-level vocabulary: 256 single-byte tokens, enough for the
// loader (the model tests do not tokenize).
inline GgufWriter tiny_vocab_writer(int n_tokens = 300) {
  GgufWriter w;
  std::vector<std::string> toks;
  for (int i = 0; i < n_tokens; ++i) toks.push_back(std::string("t").append(std::to_string(i)));
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "default");
  w.add_string_array("tokenizer.ggml.tokens", toks);
  w.add_int32_array("tokenizer.ggml.token_type", std::vector<int32_t>(n_tokens, 1));
  w.add_string_array("tokenizer.ggml.merges", {});
  return w;
}

// The small model of the runner tests: 2 layers, d_model 64, 4 heads over
// 2 K/V heads, ffn 96, weights with std 0.08 (attention far from uniform);
// gemma3's first layer slides an 8-key window.
inline SynthModelConfig small_synth_config(uint32_t seed, const std::string& arch = "llama") {
  SynthModelConfig c;
  c.arch = arch;
  c.n_layers = 2, c.d_model = 64, c.n_heads = 4, c.n_kv_heads = 2, c.ffn_dim = 96, c.seed = seed;
  c.init_std = 0.08f;
  if (arch == "gemma3") {  // layer 0 local with a window of 8 keys, layer 1 global at another RoPE base
    c.sliding_window = 8, c.swa_pattern = 2, c.rope_freq_base = 1e6f;
  }
  return c;
}

// Writes a synthetic model to a unique temp file and returns its path.
inline std::string write_synth_model(const SynthModelConfig& cfg) {
  auto bytes = tiny_vocab_writer().to_bytes();
  auto vocab = GgufFile::parse(bytes);
  if (!vocab.is_ok()) return "";
  static int counter = 0;
  char path[96];
  std::snprintf(path, sizeof path, "/tmp/agentkv_test_model_%d_%d.gguf", static_cast<int>(getpid()), counter++);
  Status st = synth_model_write(cfg, *vocab, path);
  return st.is_ok() ? path : "";
}

}  // namespace agentkv::testing
