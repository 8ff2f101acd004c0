// `agentkv bench-fidelity`: what an approximate KV-sharing scheme costs in
// quality and buys in time, against full recomputation on the same prompts
// (docs/design.md §4, "measured, not assumed"). Per prompt: full prefill on an
// engine with no cache (the reference: greedy tokens and full next-token
// distributions), then on a second engine the prompt's documents are cached
// alone, in another order, and each scheme runs free-running greedy (exact
// match, task accuracy) and is compared with the reference over the
// generated positions (KL, top-1 agreement) on one side's tokens:
//   teacher "full": the scheme runs again, teacher-forced on the
//     reference's greedy tokens (the default; its TTFT is reported);
//   teacher "scheme": the reference engine re-runs the prompt teacher-forced
//     on the scheme's greedy tokens, which is what serve --fidelity-audit
//     measures on served requests.
// Schemes run interleaved with the reference, prompt by prompt.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "agentkv/kv_sharing_params.h"
#include "util/status.h"
#include "workloads/fidelity_tasks.h"
#include "workloads/scheme_spec.h"

namespace agentkv {

using FidelityScheme = SchemeSpec;  // label as printed, e.g. "cacheblend:0.15"

// One scheme's run of one prompt, as a server would be sent it
// (FidelityOptions::on_request): the requests that cache the documents,
// then the prompt under the scheme; what it generated and measured.
struct FidelityRequestLog {
  int32_t prompt_index = 0;
  const SchemeSpec* scheme = nullptr;
  std::vector<std::vector<int32_t>> cache_prompts;  // each run for one token, scheme none
  std::vector<std::vector<int32_t>> cache_forced;   // the tokens each cache request was forced to (agents)
  bool cache_under_scheme = false;                  // the cache requests ran under the scheme (relay)
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;     // the scheme's greedy tokens
  std::vector<int32_t> reference;  // full recomputation's
  double kl = 0;                   // this prompt's mean KL, on the teacher's tokens
};

struct FidelityOptions {
  std::string model_path;
  int n_threads = 2;
  int32_t block_size = 16;
  int64_t kv_cache_mb = 1024;
  std::string kv_dtype = "f16";  // ServingOptions::kv_dtype
  std::string act_quant = "q8";  // ServingOptions::act_quant
  std::string relay_profile;     // ServingOptions::relay_profile, when a scheme is relay
  // ServingOptions::max_batch_tokens of both engines: a prompt longer is
  // prefilled in chunks (cacheblend and sparsex still select once over it).
  int32_t max_batch_tokens = 16384;
  int32_t gen_tokens = 32;
  std::string teacher = "full";  // "full" or "scheme": whose greedy tokens the KL is measured on
  FidelityTaskOptions tasks;
  std::vector<FidelityScheme> schemes;
  std::function<void(const std::string&)> progress;
  std::function<void(const FidelityRequestLog&)> on_request;  // after each scheme's run of a prompt
};

struct FidelityRow {
  std::string label;
  double mean_kl = 0;          // mean over prompts of the mean KL(full || scheme) over generated positions
  double max_kl = 0;           // the worst prompt's mean
  double top1 = 0;             // share of positions whose argmax both runs agree on
  double exact = 0;            // share of prompts whose greedy tokens all equal the reference's
  double reuse = 0;            // mean share of prompt token x layer K/V entries not computed
  double reused_tokens = 0;    // mean prompt tokens copied from segments
  double ttft_s = 0;           // median TTFT of the teacher-forced run
  double speedup = 0;          // median over prompts of TTFT(full) / TTFT(scheme)
  double accuracy = 0;         // mean over prompts of the share of expected answers in the greedy output
  std::vector<double> scores;  // each prompt's answer score, in prompt order (paired tests against full)
  std::vector<double> kls;     // each prompt's mean KL, in prompt order (paired comparisons of schemes)
  std::vector<double> reuses;  // each prompt's reuse share, in prompt order
};

struct FidelityReport {
  std::string task;           // FidelityTaskOptions::kind
  int32_t prompt_tokens = 0;  // of the first prompt
  FidelityRow full;           // the reference (KL 0, reuse 0)
  std::vector<FidelityRow> rows;
};

Result<FidelityReport> run_fidelity(const FidelityOptions& o);

// One row over several tasks' rows of one scheme: each field the mean of
// theirs, but max_kl the worst, and scores the tasks' scores one after the
// other.
FidelityRow fidelity_average_row(const std::string& label, const std::vector<FidelityRow>& rows);

}  // namespace agentkv
