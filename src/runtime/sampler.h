// Turns one row of logits into one token.
//
// First the logits are adjusted, as vLLM's v1 sampler does (logit-bias
// processor, then apply_penalties), on a float copy of the row:
//   a. logit_bias          add bias[id]
//   b. repetition_penalty  (HF / vLLM) for every token in prompt + output:
//                          a positive logit is divided by r, a negative one
//                          multiplied by r
//   c. frequency_penalty   (OpenAI) minus f * times the token was generated
//   d. presence_penalty    (OpenAI) minus p if it was generated at all
//   e. a grammar's mask    -inf for every token the grammar does not allow
// The prompt and output come from set_prompt() and accept().
//
// Filters then run in llama.cpp's default sampler-chain order:
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
#include <utility>
#include <vector>

#include "agentkv/sampling.h"
#include "util/status.h"

namespace agentkv {

// log p(id) and the n_top most likely tokens of one logits row, under the
// full temperature-1 distribution, with no sampling: prompt logprobs (the
// row at position p scores the prompt token at p + 1).
SampleResult logprobs_of(std::span<const float> logits, int32_t id, int32_t n_top);

class Sampler {
 public:
  // `p` should have passed validate(); out-of-range values are clamped.
  explicit Sampler(SamplingParams p);

  // The penalty context. set_prompt() records the prompt (the repetition
  // penalty covers it); accept() records each generated token. Both are
  // no-ops when no penalty is on.
  void set_prompt(std::span<const int32_t> prompt);
  void accept(int32_t token);

  // Picks a token from `logits` (one per vocabulary entry). Advances the RNG
  // unless the sampler is greedy. `allowed`: a grammar's token mask (bit
  // id % 32 of word id / 32 set = allowed; TokenMatcher::fill_mask), applied
  // after logit_bias and the penalties, before the filters; null = none.
  // With every token masked the result's logprob is -inf.
  SampleResult sample(std::span<const float> logits, const uint32_t* allowed = nullptr);

  // Debug and test accessor: the probability of every token after the
  // adjustments and all filters (zeros for the filtered ones). Does not touch
  // the RNG.
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

  // `logits` after logit_bias and the penalties (in `buf`), or `logits`
  // itself when none is on.
  std::span<const float> adjust(std::span<const float> logits, std::vector<float>& buf,
                                const uint32_t* allowed) const;

  SamplingParams params_;
  bool adjusts_ = false;
  std::vector<int32_t> seen_;          // distinct prompt + output ids (repetition penalty)
  std::vector<int32_t> out_counts_;    // by token id: times generated (grown on demand)
  std::vector<int32_t> out_ids_;       // distinct generated ids, to visit only those
  std::vector<uint8_t> seen_mask_;     // by token id: in seen_
  std::vector<float> adjusted_;        // reused row copy
  std::mt19937_64 rng_;
  std::vector<Candidate> cands_;  // reused across calls: no allocation per token
};

}  // namespace agentkv
