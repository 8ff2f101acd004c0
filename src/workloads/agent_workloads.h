// Multi-agent workloads for `agentkv bench-agents`, run on the serving engine
// in process (no HTTP in the measured path), each against `none` on the same
// trace (docs/design.md §7):
//   - alora_pipeline: paper 004, Sec. 4.1 and 4.4.1. The base answers a prompt
//     of L tokens (256 tokens), five adapters evaluate the conversation in
//     parallel (16 tokens each), the base answers again with the evaluations
//     appended. aLoRA adapters under `alora` against plain LoRA adapters
//     under `none`; the invocation sequence is in both prompts, as the paper
//     does for fairness.
//   - icarus_round_robin: N ICaRus agents take turns on one growing
//     trajectory (each turn: the whole trajectory as prompt, G new tokens),
//     under `icarus` and under `none`.
//   - team_docs: a team of adapters reads retrieved documents (docs/design.md §3,
//     "Schemes compose"): the exact adapter scheme alone, the segment-reuse
//     scheme alone, the two composed, and `none`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "util/status.h"

namespace agentkv {

struct AgentBenchOptions {
  std::string model_path;
  int n_threads = 2;
  int32_t block_size = 16;
  int32_t max_batch_tokens = 512;
  std::string kv_dtype = "f16";  // ServingOptions::kv_dtype
  std::string work_dir;          // adapters are written here
  uint64_t seed = 1;
  // Called with a one-line status while a workload runs (progress).
  std::function<void(const std::string&)> progress;
};

struct PipelineResult {
  int32_t prompt_len = 0;
  std::string variant;        // "alora" or "lora/none"
  double base_ttft_s = 0;     // first base turn
  double adapter_ttft_s = 0;  // median over the adapters
  double adapter_e2e_s = 0;   // median, submit -> last token
  double adapter_cached = 0;  // mean cached fraction of the adapters' prompts
  double base2_ttft_s = 0;    // the base's second turn
  double base2_cached = 0;    // its cached fraction
};

struct PipelineOptions {
  std::vector<int32_t> prompt_lens = {256, 1024, 4096, 8192};
  int32_t base_tokens = 256;
  int32_t adapter_tokens = 16;
  int32_t n_adapters = 5;
  int32_t lora_rank = 8;  // as the paper: LoRA rank 8, aLoRA rank 32
  int32_t alora_rank = 32;
};

Result<std::vector<PipelineResult>> run_alora_pipeline(const AgentBenchOptions& o, const PipelineOptions& p);

struct RoundRobinResult {
  std::string scheme;
  int64_t prompt_tokens = 0;    // all turns
  int64_t computed_tokens = 0;  // prompt tokens not served from the cache
  int32_t kv_blocks = 0;        // held or cached at the end (nothing evicted)
  double kv_mib = 0;
  double total_s = 0;
  double median_ttft_s = 0;
};

struct RoundRobinOptions {
  int32_t n_agents = 4;
  int32_t turns = 16;
  int32_t prompt_len = 512;  // the trajectory's start
  int32_t turn_tokens = 32;  // generated per turn
  int32_t rank = 8;
};

Result<std::vector<RoundRobinResult>> run_icarus_round_robin(const AgentBenchOptions& o,
                                                             const RoundRobinOptions& r);

// The team-docs trace. The base model has read every document of a library
// once (each alone: the retrieval step that caches them) and writes the
// team's trajectory. Each turn, every agent (an adapter of `kind`) answers
// with its own retrieved documents, in its own order, after the shared
// trajectory: prompt = trajectory + k documents + question (+ the aLoRA
// invocation); the agents run together, then the base writes the next turn
// from their answers.
struct TeamDocsOptions {
  std::vector<std::string> kinds = {"alora", "icarus"};  // the exact adapter schemes
  std::string reuse = "sparsex";                         // the segment-reuse scheme
  int32_t n_agents = 4;
  int32_t n_docs = 8;
  int32_t doc_tokens = 256;
  int32_t docs_per_agent = 3;
  int32_t context_tokens = 512;  // the trajectory's start
  int32_t turns = 3;
  int32_t answer_tokens = 16;  // each agent's answer
  int32_t base_tokens = 32;    // the base's turn
  int32_t rank = 8;
};

struct TeamDocsResult {
  std::string kind;              // the adapters' kind
  std::string scheme;            // none, the exact scheme, the reuse scheme, or exact+reuse
  int64_t prompt_tokens = 0;     // the agents' requests, all turns
  int64_t cached_tokens = 0;     // served by exact prefix hits
  int64_t reused_tokens = 0;     // copied from cached segments
  int64_t computed_entries = 0;  // K/V entries the agents' prefills computed (tokens x layers)
  int32_t n_layers = 0;
  double median_ttft_s = 0;  // over the agents' requests
  double total_s = 0;        // the whole trace, base turns included
};

Result<std::vector<TeamDocsResult>> run_team_docs(const AgentBenchOptions& o, const TeamDocsOptions& t);

}  // namespace agentkv
