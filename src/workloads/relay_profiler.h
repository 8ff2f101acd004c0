// `agentkv profile-relay`: measures where an upstream agent's decode-phase
// K/V deviates from a full prefill of the downstream prompt, per layer and
// token (RelayCaching §4.2, App. B.1; docs/scheme_algorithms.md §3.2), on the serving
// engine, and derives the relay layers from it (sharing/relay_profile.h).
//
// Calibration is a seeded summarize-then-answer chain, no download: agent 1
// reads a generated document of facts and summarizes it (greedy, up to
// gen_tokens); agent 2's prompt is its own instruction, agent 1's summary
// tokens as generated, and a question about the document. Agent 2 runs
// under `relay` at its exact limit (every reused token recomputed in every
// layer, which is full prefill), and a probe compares each layer's fresh V
// of the summary tokens with the V their decode wrote.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sharing/relay_profile.h"
#include "util/status.h"

namespace agentkv {

struct RelayProfilerOptions {
  std::string model_path;
  int n_threads = 2;
  int32_t samples = 16;
  int32_t doc_tokens = 384;
  int32_t gen_tokens = 128;
  uint64_t seed = 1;
  RelayProfileRules rules;
  std::function<void(const std::string&)> progress;
};

// One calibration chain as measured (its s_l: the matching sample's
// sim_sum / tokens), for an independent check of the similarity (tests/python/test_relay_profile_ref.py).
struct RelayChain {
  std::vector<int32_t> prompt1;    // agent 1's prompt
  std::vector<int32_t> summary;    // what agent 1 generated
  std::vector<int32_t> prompt2;    // agent 2's prompt: head, summary, question
  int32_t summary_at = 0;          // where the summary starts in prompt2
  std::vector<int32_t> positions;  // prompt2 positions compared (the reused tokens)
};

struct RelayCalibration {
  RelayProfile profile;
  std::vector<RelaySampleStats> samples;  // per chain, for relay_bootstrap
  std::vector<RelayChain> chains;         // the same chains, in order
  int32_t lost = 0;                       // chains whose agent 2 found nothing to reuse
};

Result<RelayCalibration> run_relay_profiler(const RelayProfilerOptions& o);

}  // namespace agentkv
