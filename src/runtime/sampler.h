// Turns one row of logits into one token.
//
// Filters run in llama.cpp's default sampler-chain order for these options:
//   1. top-k        keep the k highest logits (ties: lower id first)
//   2. top-p        keep the smallest prefix, by descending probability, whose
//                   mass reaches top_p (the token that crosses it is kept)
//   3. min-p        keep tokens with p >= min_p * p_max
//   4. temperature  divide the surviving logits by T
//   5. draw from the softmax of what is left.
// top-p and min-p therefore see the temperature-1 distribution (renormalised
// over what top-k kept), exactly as llama.cpp does; temperature only reshapes
// the survivors. temperature == 0 is greedy: argmax, lowest id on ties, no RNG.
//
// Logits may hold -inf (masked tokens); NaN counts as -inf (a model bug must
// not crash the sampler; the token is simply never drawn).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "util/status.h"

namespace agentkv {

struct SamplingParams {
  float temperature = 0.0f;  // 0 => greedy (argmax; ties -> lowest id)
  int32_t top_k = 0;         // 0 => off; >= vocab size is also off
  float top_p = 1.0f;        // 1 => off
  float min_p = 0.0f;        // 0 => off; keeps tokens with p >= min_p * p_max
  uint64_t seed = 0;         // same seed + same logits => same tokens
  int32_t n_logprobs = 0;    // top-N logprobs to report (0..20)

  static constexpr int32_t kMaxLogprobs = 20;

  Status validate() const;
};

struct TokenLogprob {
  int32_t id;
  float logprob;
};

struct SampleResult {
  int32_t id;                     // -1 only for an empty logits row
  float logprob;                  // log p(id) under the full, unfiltered, temperature-1 distribution
                                  // (what OpenAI and vLLM report as "logprobs")
  std::vector<TokenLogprob> top;  // the n_logprobs most likely tokens under that same
                                  // distribution, descending (ties: lower id first)
};

class Sampler {
 public:
  // `p` should have passed validate(); out-of-range values are clamped.
  explicit Sampler(SamplingParams p);

  // Picks a token from `logits` (one per vocabulary entry). Advances the RNG
  // unless the sampler is greedy.
  SampleResult sample(std::span<const float> logits);

  // Debug and test accessor: the probability of every token after all filters
  // (zeros for the filtered ones). Does not touch the RNG.
  std::vector<double> distribution(std::span<const float> logits) const;

  const SamplingParams& params() const { return params_; }

 private:
  struct Candidate {
    int32_t id;
    float logit;
    float weight;  // exp(logit - max_logit): the unnormalised temperature-1 probability
  };

  // Fills `cands` with the survivors of top-k, top-p and min-p, each with its
  // final (temperature-applied, unnormalised) weight; returns their sum.
  // *full_mass gets the temperature-1 sum over the whole row, for logprobs.
  double filter(std::span<const float> logits, float max_logit, std::vector<Candidate>& cands,
                double* full_mass) const;

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<Candidate> cands_;  // reused across calls: no allocation per token
};

}  // namespace agentkv
