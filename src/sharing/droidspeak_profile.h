// DroidSpeak's critical layers for a model and a team of adapters (docs/scheme_algorithms.md
// §1.3): the layers whose K/V an agent must recompute when it reuses
// another agent's cache. `agentkv profile-droidspeak` measures, per layer,
// how far a consumer agent's output moves when that one layer's K/V is the
// producer's and every other layer is its own (mean KL over prompt
// positions): DroidSpeak's layer-sensitivity probe, one layer at a time as
// LRAgent's non-contiguous lists (App. C.4). The critical set is the most
// sensitive fraction of layers (a third by default, as LRAgent's 11 of 32).
// Pure arithmetic plus the JSON the server loads (--droidspeak-profile).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"

namespace agentkv {

struct DroidspeakProfile {
  std::string model_id;    // file_content_id of the GGUF profiled
  std::string model_name;  // for messages
  int32_t n_layers = 0;
  std::vector<double> sensitivity;       // [n_layers] mean KL(consumer alone || one layer reused)
  std::vector<int32_t> critical_layers;  // ascending
  double fraction = 0;                   // of the layers made critical
  std::vector<std::string> adapters;     // the team profiled (names)
  int32_t prompts = 0;
  int32_t tokens = 0;  // per prompt
  uint64_t seed = 0;
};

// The ceil(fraction x n) most sensitive layers, ascending (ties: lower layer).
std::vector<int32_t> droidspeak_critical_layers(const std::vector<double>& sensitivity, double fraction);

Status save_droidspeak_profile(const DroidspeakProfile& p, const std::string& path);
// Loads and checks a profile for the model the engine runs: a clear error
// for a missing or corrupt file, another model (by content id), or layers
// out of range, repeated or none.
Result<DroidspeakProfile> load_droidspeak_profile(const std::string& path, const std::string& model_id,
                                                  int32_t n_layers);

}  // namespace agentkv
