// The small public API that the CLI, the server and the benchmarks use: load a
// model file once, then evaluate and generate.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/sampler.h"
#include "util/status.h"

namespace agentkv {

class Tokenizer;
struct ModelSpec;
class SequenceState;

struct EngineOptions {
  std::string model_path;
  int n_threads = 2;
  int32_t n_ctx = 4096;       // KV capacity in tokens (rounded up to whole blocks)
  int32_t block_size = 16;
  int32_t ubatch = 512;       // rows per Step during prefill
};

struct GenerateOptions {
  int32_t max_tokens = 256;
  std::vector<std::string> stop;  // stop strings (never emitted)
  bool ignore_eos = false;
};

enum class FinishReason { kStop, kLength };

struct GenerateResult {
  std::vector<int32_t> tokens;           // generated ids
  std::vector<SampleResult> samples;     // per generated token (logprobs)
  std::string text;                      // generated text up to any stop string
  FinishReason finish = FinishReason::kLength;
  int32_t prompt_tokens = 0;
  double prefill_s = 0;                  // time to first token
  double decode_s = 0;
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> create(const EngineOptions& opts);
  ~Engine();

  const ModelSpec& spec() const;
  const Tokenizer& tokenizer() const;
  const EngineOptions& options() const;

  // A fresh sequence on this engine's KV pool (single-sequence use).
  std::unique_ptr<SequenceState> new_sequence();

  // Generates from prompt ids; on_text receives streamed text pieces as soon as
  // they are safe to emit (complete UTF-8, not part of a stop string).
  Result<GenerateResult> generate(const std::vector<int32_t>& prompt, const SamplingParams& sampling,
                                  const GenerateOptions& gen,
                                  const std::function<void(const std::string&)>& on_text = nullptr);

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace agentkv
