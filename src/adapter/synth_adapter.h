// Random PEFT LoRA adapters for a base model (`agentkv synth-adapter`, tests
// and benchmarks). The magnitude is set per layer and target so that, for
// Gaussian inputs x, ||scale * (x A^T) B^T|| / ||x W^T|| is about
// target_ratio (3% by default): visible in the logits, far from breaking the
// model.
//
// With A entries ~ N(0, 1/d_in) and B entries ~ N(0, sb^2), for x ~ N(0, I):
//   E||scale * B A x||^2 = scale^2 * r * d_out * sb^2   and   E||W x||^2 = ||W||_F^2,
// so sb = target_ratio * ||W||_F / (scale * sqrt(r * d_out)).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "adapter/adapter.h"
#include "model/weights.h"
#include "util/status.h"

namespace agentkv {

struct SynthAdapterConfig {
  int32_t rank = 8;
  double alpha = 0;  // 0: 2 * rank
  std::array<bool, kLoraTargetCount> targets{true, true, true, true, true, true, true};
  uint64_t seed = 1;
  double magnitude = 1.0;        // multiplier on the default output-norm ratio
  double target_ratio = 0.03;
  std::string shared_a_group;    // non-empty: A depends on this name only (bit-identical across adapters)
  std::vector<int32_t> invocation_tokens;  // non-empty: written as alora_invocation_tokens
  bool bf16 = false;             // tensors as BF16 instead of F32
  std::string base_name;         // written as base_model_name_or_path
};

struct SynthAdapterReport {
  // Measured ||scale * B A x|| / ||W x|| for Gaussian x, mean over layers, per
  // target; negative for targets not written.
  std::array<double, kLoraTargetCount> mean_ratio{};
};

// Writes out_dir/adapter_config.json and out_dir/adapter_model.safetensors
// (B in HF row order, like a trained PEFT adapter: loaders permute q/k for
// llama-family GGUF bases).
Result<SynthAdapterReport> synth_adapter_write(const SynthAdapterConfig& cfg, const Model& base,
                                               const std::string& out_dir);

}  // namespace agentkv
