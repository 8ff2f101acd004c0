// `agentkv profile-droidspeak`: measures each layer's sensitivity to reusing
// another agent's K/V (sharing/droidspeak_profile.h) on seeded filler-text
// prompts. For every ordered pair (producer, consumer) of the adapters and
// every prompt: the consumer's logits over the prompt with its own K/V
// everywhere, then once per layer with that layer's K/V taken from the
// producer's cache (the consumer's rows keep it, writing every other
// layer), and the mean KL between the two over the prompt's second half.
// The forward passes are runtime/layer_swap_probe.h's (a K/V storage of its
// own: no request the engine serves has such a cache).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "sharing/droidspeak_profile.h"
#include "util/status.h"

namespace agentkv {

struct DroidspeakProfilerOptions {
  std::string model_path;
  int n_threads = 2;
  std::vector<std::pair<std::string, std::string>> adapters;  // (name, PEFT dir or GGUF LoRA), at least two
  int32_t prompts = 4;
  int32_t tokens = 256;  // per prompt
  double fraction = 1.0 / 3.0;
  uint64_t seed = 1;
  std::function<void(const std::string&)> progress;
};

Result<DroidspeakProfile> run_droidspeak_profiler(const DroidspeakProfilerOptions& o);

}  // namespace agentkv
