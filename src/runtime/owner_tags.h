// Owner tags, the engine's part of the redo-layer schemes (SeqSharing::
// redo_layers, DroidSpeak's critical layers; docs/scheme_algorithms.md
// §1.3): per KV slot, the agents that processed its token (the kOwnerTags
// component), and the hidden state entering the first redo layer of each
// token, kept by the agent that processed it (kOwnerHidden, at layer()).
//
// At a request's first chunk after admission, every cached position this
// agent has not processed yet (another agent wrote it) gets a row that runs
// the agent's forward and writes K/V in the redo layers only, overwriting
// the shared entries (LRAgent App. D.6); from the snapshot where one is
// kept, else from layer 0, keeping a snapshot on the way. A token an agent
// once processed is not redone when another agent later overwrote its redo
// layers: as the paper's per-agent cache length. These rows ride with the
// chunk, beyond the scheduler's token budget (it budgets tokens to compute,
// not rows; a known gap, docs/usage.md). Engine thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "adapter/adapter.h"
#include "kv/kv_component.h"
#include "kv/kv_manager.h"
#include "runtime/step.h"
#include "sharing/planner.h"

namespace agentkv {

class OwnerTags {
 public:
  OwnerTags() = default;
  // tags: the kOwnerTags component (null when no scheme declared it: then
  // nothing here does anything); hidden: kOwnerHidden, kept at `layer` (null:
  // no snapshots).
  OwnerTags(KvComponent* tags, KvComponent* hidden, int32_t layer, const KvManager* kv, int32_t block_size,
            int32_t n_layers, int32_t d_model)
      : tags_(tags),
        hidden_(hidden),
        layer_(layer),
        kv_(kv),
        bs_(block_size),
        n_layers_(n_layers),
        d_(d_model) {}

  // The snapshots' component (store_captures writes a redo request's captures there), or null.
  KvComponent* hidden() const { return hidden_; }
  int32_t layer() const { return layer_; }
  // Whether a request's rows keep and use snapshots: its first redo layer is layer().
  bool snapshots(const SeqSharing& s) const {
    return hidden_ != nullptr && !s.redo_layers.empty() && s.redo_layers.front() == layer_;
  }
  // The redo rows of a chunk (SeqPlanner::redo_rows) of a request whose
  // prompt is `tokens` and whose blocks are `blocks`, appended to the step.
  void add_redo_rows(const ChunkSpan& span, SeqPlanner& plan, const std::vector<int32_t>& tokens,
                     int32_t adapter_index, const std::vector<int32_t>& blocks, Step* step);
  // After a step: the agent of each slot that rows of a redo-layer request
  // wrote (sharing_of(q): sequence q's decision, null for none). Does nothing
  // when no scheme declared owner tags.
  void store(const Step& step, const std::function<const SeqSharing*(size_t)>& sharing_of);

 private:
  // An agent's tag, assigned on first use (the base is 0; tags share owner bits modulo 32).
  int32_t tag(const Adapter* a);

  KvComponent* tags_ = nullptr;
  KvComponent* hidden_ = nullptr;
  int32_t layer_ = -1;
  const KvManager* kv_ = nullptr;
  int32_t bs_ = 0, n_layers_ = 0, d_ = 0;
  std::unordered_map<std::string, int32_t> ids_;  // adapter content id -> tag
};

}  // namespace agentkv
