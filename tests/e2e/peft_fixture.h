// Random PEFT LoRA directories (adapter_config.json +
// adapter_model.safetensors) for a real base model, so e2e tests load
// adapters through the same path as `agentkv serve --adapter`. B is scaled
// so that ||scale·B·A||_F is `ratio` of the base weight's Frobenius norm: a
// few percent, like a trained adapter.
#pragma once

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "format/safetensors_writer.h"
#include "model/weights.h"

namespace agentkv::testing {

struct PeftSpec {
  int32_t rank = 8;
  double ratio = 0.05;
  uint32_t seed = 1;
  std::vector<int32_t> invocation_tokens;  // non-empty: an aLoRA
};

inline double frobenius_norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s);
}

// Writes the adapter under `dir` (created) for every layer of `m` and all 7
// projections. Returns false if a file cannot be written.
inline bool write_random_peft(const std::string& dir, const Model& m, const PeftSpec& spec) {
  std::filesystem::create_directories(dir);
  std::mt19937 rng(spec.seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const float alpha = 16.0f;
  const float scale = alpha / float(spec.rank);
  struct Module {
    const char* path;
    const DenseTensor& (*weight)(const LayerWeights&);
  };
  const Module modules[] = {
      {"self_attn.q_proj", [](const LayerWeights& w) -> const DenseTensor& { return w.wq; }},
      {"self_attn.k_proj", [](const LayerWeights& w) -> const DenseTensor& { return w.wk; }},
      {"self_attn.v_proj", [](const LayerWeights& w) -> const DenseTensor& { return w.wv; }},
      {"self_attn.o_proj", [](const LayerWeights& w) -> const DenseTensor& { return w.wo; }},
      {"mlp.gate_proj", [](const LayerWeights& w) -> const DenseTensor& { return w.w_gate; }},
      {"mlp.up_proj", [](const LayerWeights& w) -> const DenseTensor& { return w.w_up; }},
      {"mlp.down_proj", [](const LayerWeights& w) -> const DenseTensor& { return w.w_down; }},
  };
  SafetensorsWriter st;
  const int64_t r = spec.rank;
  for (size_t l = 0; l < m.w.layers.size(); ++l) {
    for (const Module& mod : modules) {
      const DenseTensor& w = mod.weight(m.w.layers[l]);
      const int64_t d_out = w.shape[0], d_in = w.shape[1];
      std::vector<float> a(size_t(r * d_in)), b(size_t(d_out * r));
      for (auto& x : a) x = nd(rng) / std::sqrt(float(d_in));
      for (auto& x : b) x = nd(rng);
      // With A's rows near-orthonormal, ||B·A||_F ~ ||B||_F ||A row||: scale
      // B so the delta is `ratio` of W (exactness tests do not depend on it).
      const double ba = frobenius_norm(b) * frobenius_norm(a) / std::sqrt(double(r));
      const double c = spec.ratio * frobenius_norm(w.data) / (scale * std::max(ba, 1e-30));
      for (auto& x : b) x = float(x * c);
      const std::string base = "base_model.model.model.layers." + std::to_string(l) + "." + mod.path;
      st.add_f32(base + ".lora_A.weight", {r, d_in}, a);
      st.add_f32(base + ".lora_B.weight", {d_out, r}, b);
    }
  }
  nlohmann::json cfg = {{"peft_type", "LORA"},
                        {"r", spec.rank},
                        {"lora_alpha", alpha},
                        {"target_modules", {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}},
                        {"use_rslora", false},
                        {"fan_in_fan_out", false}};
  if (!spec.invocation_tokens.empty()) cfg["alora_invocation_tokens"] = spec.invocation_tokens;
  std::ofstream(dir + "/adapter_config.json") << cfg.dump(2);
  return st.write(dir + "/adapter_model.safetensors").is_ok();
}

}  // namespace agentkv::testing
