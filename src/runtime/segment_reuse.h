// Segment reuse, the engine's part (docs/design.md §2, SegmentIndex; the
// planners live in sharing/, sharing/reuse.h says what they see): the
// lookup of a request's cached segments, the K/V copies of each chunk with
// their captured state, and what the planner is shown of a chunk. The rows
// the planner then wants are the engine's (serving_engine_reuse.cpp).
// Engine thread only.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/kv_manager.h"
#include "runtime/captures.h"
#include "runtime/step.h"
#include "sched/scheduler.h"
#include "sharing/reuse.h"

namespace agentkv {

// One request's segment reuse: per prompt position whether its K/V is
// copied from a cached segment, where its run starts, and the copied
// position's captured state. Looked up once, at the first prompt chunk.
struct ReuseState {
  int32_t min_segment = 0;  // shortest segment reused, tokens (set at submission)
  bool looked_up = false;
  int32_t preemptions = 0;  // the request's preemptions when looked up
  std::vector<SegmentHit> hits;
  std::vector<uint8_t> reused;      // [n_prompt]
  std::vector<int32_t> run_start;   // [n_prompt], -1 where not reused
  int32_t reused_tokens = 0;        // copied so far
  std::vector<uint8_t> has_hidden;  // [n_prompt]: a reused position's hidden-state snapshot is there
  std::vector<float> influence;     // [n_prompt]: a reused position's influence score

  int32_t n_prompt() const { return static_cast<int32_t>(reused.size()); }
};

class SegmentReuse {
 public:
  SegmentReuse() = default;
  SegmentReuse(KvManager* kv, const Captures* captures, int32_t block_size, int32_t n_layers)
      : kv_(kv), captures_(captures), bs_(block_size), n_layers_(n_layers) {}

  // Once, at the request's first chunk: the cached segments of its prompt
  // (r.n_prompt tokens) after `from`, where its exact prefix hit ends (prefix
  // hits take precedence). Each position is looked up under the lineage its
  // blocks carry: the base one before lineage_from (aLoRA: its invocation),
  // the request's own from there. K/V from the first reused token on is
  // approximate: r's cache policy stops indexing it as exact.
  void lookup(ReuseState& st, SchedRequest& r, int32_t lineage_from, int32_t from) const;
  // The K/V copies of the chunk's reused positions [b, e) into `blocks`, and
  // their captured state. A source block evicted (or re-allocated, this very
  // step included) since the lookup is not copied: its whole hit is
  // recomputed instead.
  void queue_copies(ReuseState& st, int32_t b, int32_t e, const std::vector<int32_t>& blocks, Step* step);
  // What the planner sees of the planned range [cb, e).
  ReuseChunk chunk(const ReuseState& st, int32_t cb, int32_t e) const;
  // A reused row the planner wants from layer `from`: it resumes there from
  // its position's snapshot when one is kept (only at the captures' layer),
  // and otherwise runs from layer 0.
  void resume_row(const ReuseState& st, int32_t from, int64_t d_model, TokenRow* row, Step* step) const;

 private:
  std::vector<SegmentHit> find_hits(const SchedRequest& r, int32_t lineage_from, int32_t from,
                                    int32_t min_segment) const;

  KvManager* kv_ = nullptr;
  const Captures* captures_ = nullptr;
  int32_t bs_ = 0, n_layers_ = 0;
};

}  // namespace agentkv
