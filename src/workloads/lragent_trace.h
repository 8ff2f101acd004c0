// LRAgent's efficiency trace (paper 000, App. C.5, Table 10; docs/scheme_algorithms.md
// §1.5) for `agentkv bench-agents --workload lragent-trace`: three agents
// (plan, action, reflect: LoRA adapters on one base) on one growing
// trajectory of random token ids, 17 steps per iteration, each step an agent
// prefilling new tokens and decoding some:
//   plan 512/32; plan 8/8; action 8/8;
//   4 x [plan L_ctx/32; plan 8/8; action 8/8];
//   reflect 32/32; reflect 8/8
// (912 + 4 L_ctx tokens in all). Each scheme runs the same trace on a fresh
// engine whose pool holds everything (nothing is evicted), schemes
// interleaved per repetition. Reported as the paper does: the TTFT sum over
// the steps, throughput (trajectory tokens / end-to-end time), and the peak
// bytes of K/V plus LR cache held.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"
#include "workloads/agent_workloads.h"

namespace agentkv {

struct LragentTraceOptions {
  std::vector<int32_t> ctx_lens = {256, 512, 1024, 1536};
  // Scheme specs: a scheme name, "+noflash" for attention over expanded V.
  std::vector<std::string> schemes = {"none",         "full",           "droidspeak",
                                      "lragent-base", "lragent-baselr", "lragent-baselr+noflash"};
  int32_t reps = 1;
  // plan/, action/ and reflect/ PEFT adapters (e.g. tools/lragent/adapters);
  // empty: random ones in the paper's setting (q and v, r 8, alpha 16, one v
  // A shared by the three).
  std::string adapter_dir;
  std::vector<int32_t> critical_layers;  // droidspeak's; else from droidspeak_profile
  std::string droidspeak_profile;
};

struct LragentTraceResult {
  int32_t ctx_len = 0;
  std::string scheme;  // the spec, "+noflash" included
  int32_t rep = 0;
  double ttft_sum_s = 0;      // over the 17 steps
  double e2e_s = 0;           // the whole iteration
  int64_t total_tokens = 0;   // the trajectory's final length
  int64_t computed_rows = 0;  // prefill token rows computed (K/V entries / n_layers), all steps
  int64_t peak_kv_bytes = 0;  // K/V (and LR cache) blocks held or cached, at the fullest
  double throughput() const { return e2e_s > 0 ? double(total_tokens) / e2e_s : 0; }
};

// One (agent, new prompt tokens, decode tokens) step of the trace.
struct LragentTraceStep {
  const char* agent;
  int32_t prefill;
  int32_t decode;
};
std::vector<LragentTraceStep> lragent_trace_steps(int32_t ctx_len);

Result<std::vector<LragentTraceResult>> run_lragent_trace(const AgentBenchOptions& o,
                                                          const LragentTraceOptions& t);

}  // namespace agentkv
