// A calibration probe of the forward pass: how far one agent's output moves
// when, over a prompt, one layer's K/V is another agent's and every other
// layer's is its own. `agentkv profile-droidspeak` measures each layer's
// sensitivity with it (sharing/droidspeak_profile.h).
//
// No request the serving engine runs has such a cache: the engine always
// computes a prompt's last positions itself, and reads no cache for a
// request whose prompt rows return logits. So the probe runs the Runner on
// a K/V storage of its own, in three regions of the prompt's blocks (the
// producer's K/V, the consumer's own, and the mix: the consumer's rows
// writing every layer but the probed one, which keeps the producer's). It
// is the runtime's one other owner of a Runner, beside the engine.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "adapter/adapter.h"
#include "model/weights.h"
#include "util/status.h"

namespace agentkv {

class LayerSwapProbe {
 public:
  // For prompts of n_tokens tokens, on n_threads threads; f32 activations
  // and K/V (the reference mode: the probe ranks layers, and the q8 path's
  // ~1e-3 on the logits is not part of what it measures).
  static Result<std::unique_ptr<LayerSwapProbe>> create(std::shared_ptr<const Model> model, int n_threads,
                                                        int32_t n_tokens);
  ~LayerSwapProbe();

  // Adds to (*sensitivity)[l], for every layer l, the consumer's mean KL
  // (its own run against the one with the producer's K/V at l) over the
  // rows from first_scored on. toks has n_tokens ids.
  Status add_sensitivity(const std::vector<int32_t>& toks, const Adapter& producer, const Adapter& consumer,
                         int32_t first_scored, std::vector<double>* sensitivity);

 private:
  struct Impl;
  explicit LayerSwapProbe(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace agentkv
