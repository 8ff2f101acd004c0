// A request as the scheduler sees it: token ids and how many of them have KV
// in the cache. Sampling, detokenisation and stop strings live with the
// engine; the scheduler only decides which tokens are computed when.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "kv/cache_key_policy.h"
#include "kv/kv_manager.h"

namespace agentkv {

enum class RequestState { kWaiting, kRunning, kFinished };

struct SchedRequest {
  RequestId id = 0;
  std::vector<int32_t> tokens;  // prompt, then every generated token
  int32_t n_prompt = 0;
  // Tokens whose KV is in the request's blocks. tokens.size() - n_computed
  // tokens are still to run: the prompt (in chunks), then one per decode
  // step. Preemption resets it to 0 (recompute), never loses tokens.
  int32_t n_computed = 0;
  // How its KV blocks are keyed in the prefix cache (lineage, namespace,
  // approximate K/V, a component pool): the engine's, applied through the
  // KV manager; the scheduler reads only whether it holds pool blocks.
  CacheKeyPolicy cache;
  RequestState state = RequestState::kWaiting;
  // Prompt tokens that came from the prefix cache at first admission (what
  // the API reports as cached_tokens); -1 until then.
  int32_t n_cached_prompt = -1;
  // false: computes its whole prompt even when blocks are cached (prompt
  // logprobs need every prompt row's logits); it still commits its blocks.
  bool read_cache = true;
  // >= 0: tokens from this index on run one per step (ServeRequest's
  // one_per_step_from); the chunk before ends there. -1: chunks as the budget allows.
  int32_t one_per_step_from = -1;
  int32_t n_preemptions = 0;
  // Tokens of the K/V prefix hit at the latest admission: positions before
  // it keep their cached K/V (for the engine's rows).
  int32_t kv_hit_tokens = 0;
  // Work in token rows (token-layers / layers, rounded up) beyond the
  // request's tokens, set by the engine (a whole-prompt selection,
  // SeqPlanner::whole_prompt_layer; the scheduler knows no scheme):
  // - prompt_end_work: what the chunk that completes the prompt carries
  //   besides its tokens (earlier chunks' positions at the selection layer);
  // - pending_work: rows of tokens already scheduled that still wait to run
  //   (the rows kept above the selection layer). While it is > 0 the request
  //   gets shares of work with no tokens, and samples nothing in between.
  int32_t prompt_end_work = 0;
  int32_t pending_work = 0;
  // Idle priority (the fidelity audit's exact re-runs): admitted only when
  // no other request waits, given at most SchedulerConfig::background_rows
  // of a step while others are active, and dropped (never requeued) first
  // when the pool runs short.
  bool background = false;
  // Admitted before the waiting requests without it (in arrival order among
  // themselves), except that after SchedulerConfig::priority_streak of them
  // in a row one of the others goes. The engine sets it for the next turn of
  // an agent session whose blocks the cache protects.
  bool priority = false;
};

}  // namespace agentkv
