// `agentkv generate` on the serving engine, the one engine every command
// runs. With an adapter it lets the adapter and a KV-sharing scheme be tried
// without a server: with base_first the prompt runs on the base model first
// (as in an agent pipeline where the base answered before the adapter is
// invoked), so the adapter's request can reuse the base's KV as the scheme
// allows, and the result says how many prompt tokens came from the cache.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "agentkv/serving.h"
#include "runtime/engine_client.h"
#include "util/status.h"

namespace agentkv::cli {

struct ServingGenerateOptions {
  std::string adapter;     // the served name that generates ("" = the base)
  std::string kv_sharing;  // "" = the engine's default
  bool base_first = false;
  SamplingParams sampling;
  int32_t max_tokens = 256;
  std::vector<std::string> stop;  // stop strings (never emitted)
  bool ignore_eos = false;
};

struct ServingGenerateResult {
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;  // of the adapter's request: reused from the cache
  int32_t completion_tokens = 0;
  double ttft_s = 0;
  double total_s = 0;
  std::string finish;                 // "stop" or "length"
  std::vector<SampleResult> samples;  // per generated token of the adapter's request
};

// Runs the request(s) to the end, passing the generated text to on_text as
// it arrives. An engine error or an error event is the returned error.
Result<ServingGenerateResult> generate_serving(ServingEngine& engine, const std::vector<int32_t>& prompt,
                                               const ServingGenerateOptions& o,
                                               const std::function<void(const std::string&)>& on_text);

}  // namespace agentkv::cli
