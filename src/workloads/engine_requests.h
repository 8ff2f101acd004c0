// What the agent benchmarks share to drive a ServingEngine in process:
// submit requests together and wait for their outcomes (tokens, TTFT, what
// the prefix cache served), on runtime/engine_client.h; random prompts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agentkv/serving.h"
#include "util/status.h"

namespace agentkv::bench {

struct Done {
  std::vector<int32_t> tokens;
  int32_t prompt_tokens = 0;
  int32_t cached = 0;
  int64_t prefill_token_layers = 0;  // K/V entries the prompt's prefill computed
  int32_t reused = 0;                // prompt tokens whose K/V was copied from a cached segment
  double ttft_s = 0;
  double e2e_s = 0;
  bool lr_fallback = false;
  std::string error;
};

// Submits the requests together and waits for all of them.
std::vector<Done> run_together(ServingEngine& eng, std::vector<ServeRequest> reqs);

// Greedy, end-of-text ignored: exactly max_tokens tokens.
ServeRequest request(std::vector<int32_t> prompt, int32_t max_tokens, const std::string& adapter);

// Token ids away from the special tokens at the start of the vocabulary.
std::vector<int32_t> random_prompt(int32_t n, int32_t n_vocab, uint64_t seed);

Status first_error(const std::vector<Done>& v);

}  // namespace agentkv::bench
