// The public sampling types: what a request asks of the sampler
// (SamplingParams) and what it gets back per token (SampleResult). The
// sampler itself (src/runtime/sampler.h) is internal; the serving API and its
// clients need only these.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "agentkv/status.h"

namespace agentkv {

struct SamplingParams {
  float temperature = 0.0f;  // 0 => greedy (argmax; ties -> lowest id)
  int32_t top_k = 0;         // 0 => off; >= vocab size is also off
  float top_p = 1.0f;        // 1 => off
  float min_p = 0.0f;        // 0 => off; keeps tokens with p >= min_p * p_max
  uint64_t seed = 0;         // same seed + same logits => same tokens
  int32_t n_logprobs = 0;    // top-N logprobs to report (0..20)
  // Compute the chosen token's logprob (SampleResult::logprob): a pass of
  // exp over the whole vocabulary per token, which the server skips when a
  // request asks for no logprobs. Off (and n_logprobs 0): logprob is NaN.
  bool logprob = true;
  float repetition_penalty = 1.0f;  // 1 => off; > 0 (vLLM's range)
  float frequency_penalty = 0.0f;   // 0 => off; [-2, 2] (OpenAI's and vLLM's range)
  float presence_penalty = 0.0f;    // 0 => off; [-2, 2]
  std::vector<std::pair<int32_t, float>> logit_bias = {};  // token id -> bias in [-100, 100]

  static constexpr int32_t kMaxLogprobs = 20;
  static constexpr float kMaxPenalty = 2.0f;    // |frequency|, |presence|
  static constexpr float kMaxLogitBias = 100.0f;

  // Range checks of every field; logit_bias ids are checked against the
  // vocabulary only when vocab_size > 0.
  Status validate(int32_t vocab_size = 0) const;
  // Any of logit_bias and the penalties is on: the sampler works on a copy.
  bool adjusts_logits() const;
};

struct TokenLogprob {
  int32_t id;
  float logprob;
};

struct SampleResult {
  int32_t id;                     // -1 only for an empty logits row
  float logprob;                  // log p(id) under the full, unfiltered, temperature-1 distribution
                                  // of the model's raw logits, before bias and penalties
                                  // (what OpenAI and vLLM, logprobs_mode=raw_logprobs, report)
  std::vector<TokenLogprob> top;  // the n_logprobs most likely tokens under that same
                                  // distribution, descending (ties: lower id first)
};

}  // namespace agentkv
