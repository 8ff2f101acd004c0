// Benchmark and test hooks of a request, kept out of the public API
// (include/agentkv/serving.h holds only a pointer to them): agentkv's own
// tools (`agentkv logits`, bench-fidelity, profile-relay, the server's
// fidelity audit) and tests set them; a request without them runs none.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "agentkv/serving.h"

namespace agentkv {

struct ServeRequestHooks {
  // For benchmarks (not on the HTTP API): the engine emits these tokens in
  // order instead of sampling (teacher forcing: the logprobs, and the logits
  // with return_logits, are those of the forced tokens' positions).
  std::vector<int32_t> forced_tokens;
  // Hooks for `agentkv logits`, which checks this engine's forward pass
  // against an independent reference (tests/python/test_logits.py):
  // return_logits: every event that samples a token also carries the raw
  // logits row it sampled from (ServeEvent::logits); with max_tokens 1 that
  // is the last prompt position's row.
  bool return_logits = false;
  // >= 0: prompt tokens from this index on are computed one per step, as
  // decode computes generated tokens, instead of in prefill chunks (the
  // chunk before stops at this index); exercises the KV cache path. -1: off.
  int32_t one_per_step_from = -1;
  // Idle priority (the server's fidelity audit; not on the HTTP API): the
  // request is admitted only when no other request waits (or, with
  // ServingOptions::background_reserve, one at a time), takes at most
  // max(background_rows, background_reserve) of a step while others run, and is the
  // first to go when the KV pool runs short: it then ends with kError and
  // an error that starts with "dropped". Its tokens count in no stats.
  bool background = false;
  // For `agentkv profile-relay` and tests (not on the HTTP API): with a
  // segment-reuse scheme, called on the engine thread at every layer for the
  // prompt's reused positions active there, with their fresh K (after RoPE)
  // and V and the K/V copied from the cache (K rotated to the position;
  // rows in position order, [n, kv_dim] each). Use a scheme at its exact
  // limit so that every reused position runs every layer.
  struct KvProbe {
    int32_t layer = 0;
    const int32_t* pos = nullptr;
    int64_t n = 0;
    const float* k = nullptr;
    const float* cached_k = nullptr;
    const float* v = nullptr;
    const float* cached_v = nullptr;
    int64_t kv_dim = 0;
    int64_t head_dim = 0;
  };
  std::function<void(const KvProbe&)> kv_probe;
};

// The request's hooks, or the empty set when it has none.
inline const ServeRequestHooks& request_hooks(const ServeRequest& r) {
  static const ServeRequestHooks kNone;
  return r.hooks ? *r.hooks : kNone;
}

// The request's hooks to edit: a copy of the ones it has (they are shared and
// const), set back on it.
inline ServeRequestHooks& edit_request_hooks(ServeRequest& r) {
  auto h = r.hooks ? std::make_shared<ServeRequestHooks>(*r.hooks) : std::make_shared<ServeRequestHooks>();
  ServeRequestHooks* p = h.get();
  r.hooks = std::move(h);
  return *p;
}

}  // namespace agentkv
