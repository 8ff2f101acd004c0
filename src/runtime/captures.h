// Captures, the engine's part of the schemes that keep state a later agent
// resumes from (the KV components of role kCaptureHidden and
// kCaptureInfluence; RelayCaching, docs/scheme_algorithms.md §3.1): per KV
// slot, the hidden state entering layer() of the token, and its influence
// score, the attention mass it received from later decode steps while it
// was generated. A reused segment's captures travel with its K/V (copy());
// a planner reads them through ReuseChunk. Engine thread only.
#pragma once

#include <cstdint>
#include <span>

#include "kv/kv_component.h"
#include "kv/kv_manager.h"
#include "runtime/step.h"
#include "sharing/planner.h"

namespace agentkv {

class Captures {
 public:
  Captures() = default;
  // hidden: kCaptureHidden, kept at `layer` (null: none kept); influence:
  // kCaptureInfluence (null: no scheme captures, and nothing here does
  // anything); every_request: every request captures, not only those whose
  // planner asks (SeqPlanner::captures_state).
  Captures(KvComponent* hidden, KvComponent* influence, int32_t layer, bool every_request,
           const KvManager* kv, int32_t block_size, int32_t n_layers)
      : hidden_(hidden),
        influence_(influence),
        layer_(layer),
        every_(every_request),
        kv_(kv),
        bs_(block_size),
        n_layers_(n_layers) {}

  // A scheme declared captures.
  bool on() const { return influence_ != nullptr; }
  // Whether a request with planner `p` captures.
  bool wants(const SeqPlanner& p) const { return on() && (every_ || p.captures_state()); }
  // The hidden states' component, or null; the layer they enter (-1: none kept).
  KvComponent* hidden() const { return hidden_; }
  int32_t layer() const { return hidden_ != nullptr ? layer_ : -1; }

  // What a row of a capturing request whose prompt has n_prompt tokens asks
  // the runner for: the hidden state at layer() when the row passes it, and
  // influence for a generated token.
  void mark(int32_t n_prompt, TokenRow* row) const;
  // A K/V copy's captured state, from slot src (of generation src_gen) to dst.
  void copy(int64_t src, uint32_t src_gen, int64_t dst) const;
  // What slot `slot` holds: whether a hidden state, and the influence score (0: none).
  bool has_hidden(int64_t slot) const {
    return hidden_ != nullptr && !hidden_->read(slot, kv_->slot_generation(slot)).empty();
  }
  float influence(int64_t slot) const;
  // The hidden state kept at slot `slot` (empty when none).
  std::span<const float> hidden_at(int64_t slot) const;
  // After a step: the influence sequence q's rows gave to the request's
  // generated tokens before its latest query (positions n_prompt on), added
  // to their scores.
  void add_influence(const Step& step, const StepOutput& so, size_t q, int32_t n_prompt) const;

 private:
  KvComponent* hidden_ = nullptr;
  KvComponent* influence_ = nullptr;
  int32_t layer_ = -1;
  bool every_ = false;
  const KvManager* kv_ = nullptr;
  int32_t bs_ = 0, n_layers_ = 0;
};

}  // namespace agentkv
