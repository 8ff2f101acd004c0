// What the bench-relay workloads share: the engine they run on, one agent's
// request run to completion, and the statistics of their tables.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "agentkv/serving.h"
#include "workloads/relay_chain.h"

namespace agentkv {

struct RelayEngine {
  std::unique_ptr<ServingEngine> engine;
  int32_t n_layers = 0;
};

// An engine for the options, its KV pool holding `kv_tokens` tokens unless
// o.kv_cache_mb is set; rejects a scheme list without "none".
Result<RelayEngine> relay_engine_create(const RelayBenchOptions& o, int64_t kv_tokens);

// A request of agent `agent` (1-based) of a chain under `scheme`, in the
// namespace `salt`.
ServeRequest chain_request(std::vector<int32_t> prompt, const SchemeSpec& scheme, const std::string& salt,
                           int32_t max_tokens);

// Submits and waits for the last event; an error of the engine is an error.
Result<ChainAgentRun> chain_run_agent(ServingEngine& e, ServeRequest req, int32_t agent, int32_t n_layers);

// 1 - prefill_token_layers / (prompt_tokens x n_layers); 0 for an empty prompt.
double chain_reuse_rate(int64_t prefill_token_layers, int64_t prompt_tokens, int32_t n_layers);

// "none"'s index in o.schemes (relay_engine_create checked it is there).
size_t chain_none_index(const RelayBenchOptions& o);

}  // namespace agentkv
