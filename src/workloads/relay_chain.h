// `agentkv bench-relay`: multi-agent chains on the serving engine, in process,
// each agent's prompt holding every upstream agent's generated tokens
// verbatim (relay_chain_prompt.h), so a segment-reuse scheme can serve them
// from the upstream decode KV (RelayCaching, paper 003 §5; docs/scheme_algorithms.md §3.6):
//   ttft-chain       Table 2: n agents, a first prompt of exactly P tokens,
//                    each agent emits G tokens (forced length); TTFT per agent.
//   context-scaling  Fig. 8: 3 agents, agents 1 and 2 emit C/2 tokens each;
//                    TTFT of agent 3 per cumulative output C.
//   accuracy-chain   a seeded 3-agent task (relay_chain_task.h) SmolLM2 can
//                    solve with full prefill; accuracy and reuse per scheme.
// Every scheme runs its chain in a namespace of its own (cache_salt), so
// nothing one chain cached serves another; schemes are interleaved per
// repetition (and per instance). `none` is the full-prefill reference.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "util/status.h"
#include "workloads/relay_chain_task.h"
#include "workloads/scheme_spec.h"

namespace agentkv {

struct RelayBenchOptions {
  std::string model_path;
  int n_threads = 2;
  int32_t block_size = 16;
  int64_t kv_cache_mb = 0;           // 0: enough for the workload (relay_bench_kv_tokens)
  std::string kv_dtype = "f16";      // ServingOptions::kv_dtype
  int32_t max_batch_tokens = 16384;  // one chunk per prompt: a scheme selects over the whole prompt
  std::vector<SchemeSpec> schemes;   // must hold "none"
  // The relay layer profile the engine loads (ServingOptions::relay_profile)
  // when a scheme is relay; "" = none (relay then needs its layers per spec).
  std::string relay_profile;
  uint64_t seed = 1;
  std::function<void(const std::string&)> progress;
};

// One agent's request, as the engine reported it.
struct ChainAgentRun {
  int32_t agent = 0;  // 1-based
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;  // exact prefix hit
  int32_t reused_tokens = 0;  // copied from cached segments
  int64_t prefill_token_layers = 0;
  int32_t completion_tokens = 0;
  double ttft_s = 0;
  double reuse_rate = 0;        // 1 - prefill_token_layers / (prompt_tokens x n_layers)
  std::vector<int32_t> tokens;  // generated ids
  std::string text;
};

// A scheme's median over repetitions at one point (agent, or output length).
struct ChainCell {
  std::string label;
  int32_t point = 0;          // ttft-chain: agent (2..n); context-scaling: C
  int32_t prompt_tokens = 0;  // median
  double ttft_s = 0;          // median
  double speedup = 0;         // median TTFT of none / this median
  double reused_tokens = 0;   // median
  double reuse_rate = 0;      // median
  double cached_tokens = 0;   // median
};

struct ChainReport {
  int32_t n_layers = 0;
  std::vector<ChainCell> cells;  // by point, then scheme in the given order
  // Every measured run: runs[i][scheme][j], i over the repetitions
  // (context-scaling: over outputs x repetitions, C-major), j over the
  // measured agents (ttft-chain: agents 2..n; context-scaling: agent 3).
  std::vector<std::vector<std::vector<ChainAgentRun>>> runs;
};

struct TtftChainOptions {
  int32_t agents = 5;
  int32_t first_prompt_tokens = 512;
  int32_t gen_tokens = 1024;
  int32_t reps = 3;
  float temperature = 0.8f;  // sampled (seeded alike for every scheme), so long outputs do not loop
};

Result<ChainReport> run_ttft_chain(const RelayBenchOptions& o, const TtftChainOptions& t);

struct ContextScalingOptions {
  std::vector<int32_t> outputs = {512, 1024, 2048, 4096, 6144};  // cumulative output C of agents 1 and 2
  int32_t first_prompt_tokens = 512;
  int32_t reps = 3;
  float temperature = 0.8f;
};

Result<ChainReport> run_context_scaling(const RelayBenchOptions& o, const ContextScalingOptions& c);

struct AccuracyChainOptions {
  int32_t instances = 50;
  int32_t concurrency = 8;  // instances in flight (the engine batches their requests)
  int32_t gen_tokens = 64;  // per agent, greedy, stops at end of generation
  RelayTaskOptions task;
  bool show_outputs = false;  // every agent's output on the progress stream
};

struct AccuracyRow {
  std::string label;
  int32_t correct = 0, instances = 0;
  double accuracy = 0;
  double reuse_rate = 0;       // pooled over agents 2 and 3 of every instance
  double reused_tokens = 0;    // mean per downstream agent
  double cached_tokens = 0;    // mean per downstream agent
  double agree_with_none = 0;  // share of instances whose final output equals none's
  // Share of instances whose Extractor (agent 1) and Reasoner (agent 2)
  // outputs already pass the final check: where the chain gains or loses.
  double agent1_accuracy = 0, agent2_accuracy = 0;
};

struct AccuracyReport {
  int32_t n_layers = 0;
  std::vector<AccuracyRow> rows;  // schemes in the given order
};

Result<AccuracyReport> run_accuracy_chain(const RelayBenchOptions& o, const AccuracyChainOptions& a);

}  // namespace agentkv
