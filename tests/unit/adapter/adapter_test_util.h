// A tiny base ModelSpec and builders for PEFT and GGUF LoRA adapters in
// memory, so the adapter tests need no model file.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "adapter/adapter.h"
#include "adapter/lora_target.h"
#include "format/gguf.h"
#include "format/safetensors_writer.h"
#include "model/model_spec.h"

namespace agentkv::test {

// llama, 2 layers, d_model 16, 4 heads / 2 kv heads of 4, ffn 24, vocab 100.
inline ModelSpec tiny_spec(const char* arch = "llama") {
  ModelSpec s;
  s.arch = *arch_lookup(arch);
  s.rope_style = s.arch.rope_style;
  s.n_layers = 2;
  s.d_model = 16;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.head_dim = 4;
  s.ffn_dim = 24;
  s.n_vocab = 100;
  return s;
}
inline constexpr int32_t kTinyVocab = 100;

// Deterministic distinct values: v(i) = tag + i / 1024 (exact in f32 and bf16
// only for small i; tests compare f32 files).
inline std::vector<float> ramp(int64_t n, float tag) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = tag + static_cast<float>(i) / 1024.0f;
  return v;
}

inline float tag_of(int32_t layer, LoraTarget t, bool b) {
  return static_cast<float>(layer * 100 + static_cast<int>(t) * 10 + (b ? 5 : 0));
}

struct PeftFiles {
  nlohmann::ordered_json config;
  SafetensorsWriter tensors;
  std::string config_text() const { return config.dump(); }
  std::vector<uint8_t> tensor_bytes() const { return tensors.to_bytes(); }
};

inline nlohmann::ordered_json peft_config(int32_t r, double alpha, std::vector<std::string> targets) {
  nlohmann::ordered_json c;
  c["peft_type"] = "LORA";
  c["r"] = r;
  c["lora_alpha"] = alpha;
  c["target_modules"] = targets;
  c["bias"] = "none";
  c["fan_in_fan_out"] = false;
  c["use_rslora"] = false;
  c["rank_pattern"] = nlohmann::ordered_json::object();
  c["alpha_pattern"] = nlohmann::ordered_json::object();
  c["layers_to_transform"] = nullptr;
  c["alora_invocation_tokens"] = nullptr;
  return c;
}

// A valid adapter over `targets` of every layer, with ramp() values.
inline PeftFiles peft_adapter(const ModelSpec& s, int32_t r, std::vector<LoraTarget> targets, double alpha = 16) {
  PeftFiles f;
  std::vector<std::string> names;
  for (LoraTarget t : targets) names.push_back(lora_target_peft_name(t));
  f.config = peft_config(r, alpha, names);
  for (int32_t l = 0; l < s.n_layers; ++l) {
    for (LoraTarget t : targets) {
      const LoraBaseShape b = lora_base_shape(s, t);
      f.tensors.add_f32(peft_tensor_name(l, t, false), {r, b.d_in}, ramp(r * b.d_in, tag_of(l, t, false)));
      f.tensors.add_f32(peft_tensor_name(l, t, true), {b.d_out, r}, ramp(b.d_out * r, tag_of(l, t, true)));
    }
  }
  return f;
}

inline std::string gguf_name(int32_t layer, LoraTarget t, bool b) {
  return "blk." + std::to_string(layer) + "." + lora_target_gguf_name(t) + ".weight" + (b ? ".lora_b" : ".lora_a");
}

// A GGUF LoRA with the header keys set; tensors are added by the caller.
inline GgufWriter gguf_adapter_header(const char* arch = "llama", float alpha = 16) {
  GgufWriter w;
  w.add_string("general.architecture", arch);
  w.add_string("general.type", "adapter");
  w.add_string("adapter.type", "lora");
  w.add_float32("adapter.lora.alpha", alpha);
  return w;
}

// Adds one pair with PEFT-shaped values (ne reversed from row-major).
inline void gguf_add_pair(GgufWriter& w, const ModelSpec& s, int32_t layer, LoraTarget t, int32_t r) {
  const LoraBaseShape b = lora_base_shape(s, t);
  w.add_tensor_f32(gguf_name(layer, t, false), {b.d_in, r}, ramp(r * b.d_in, tag_of(layer, t, false)));
  w.add_tensor_f32(gguf_name(layer, t, true), {r, b.d_out}, ramp(b.d_out * r, tag_of(layer, t, true)));
}

template <typename T>
void expect_error(const Result<T>& r, const std::string& substring) {
  ASSERT_FALSE(r.is_ok()) << "loaded although expected: " << substring;
  const std::string& msg = r.status().message();
  EXPECT_NE(msg.find(substring), std::string::npos) << "message: " << msg << "\nexpected: " << substring;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

}  // namespace agentkv::test
