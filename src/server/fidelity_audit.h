// The online fidelity audit (serve --fidelity-audit RATE): what a KV-sharing
// scheme costs on the server's own traffic. A sampled share of the requests
// that ask for a sharing scheme keep the logits of their first N generated
// positions; after they finish, a worker re-runs each one exactly (scheme
// none, the served tokens teacher-forced, at idle priority:
// ServeRequest::background) and records, per scheme, model and tenant, the
// mean KL(exact || served) over those positions and the share whose argmax
// agrees, as /metrics histograms.
//
// A decorator: it wraps the engine and forwards everything else unchanged,
// so neither the engine nor the HTTP handlers know of it. The served
// request's client sees no difference (the logits it keeps are stripped
// from the events unless the request asked for them).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "agentkv/serving.h"
#include "server/metrics.h"

namespace agentkv::server {

struct FidelityAuditConfig {
  double rate = 0;                      // share of requests under a sharing scheme audited, [0, 1]
  int32_t tokens = 16;                  // generated positions compared, >= 1
  std::string default_scheme = "none";  // the engine's --kv-sharing, for requests that name none
  std::string base_model = "base";      // the model label of requests with no adapter (the served name)
  int32_t max_pending = 16;             // finished audits waiting for their re-run; beyond, skipped
  uint64_t seed = 0x5eed;               // of the sampling
};

// Buckets of the KL histogram: exact (0) lands in the first.
const std::vector<double>& fidelity_audit_kl_buckets();

// `inner` wrapped; `registry` must outlive the returned engine. rate 0
// returns an engine that audits nothing (and registers nothing).
std::unique_ptr<ServingEngine> make_auditing_engine(std::unique_ptr<ServingEngine> inner,
                                                    const FidelityAuditConfig& cfg,
                                                    MetricsRegistry& registry);

}  // namespace agentkv::server
