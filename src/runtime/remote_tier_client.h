// The engine's client of the remote KV tier (ServingOptions::kv_remote):
// exact blocks the prefix index registers are written to the tier at the end
// of their step, each with a segment ref when the segment index holds it; a
// fresh request whose prompt prefix is not cached here asks the tier for the
// missing blocks and waits here, before the scheduler sees it, until the
// answer comes or until recomputing would have been done (the moving
// average of seconds per token row, capped by kv_remote_wait_s). Blocks that
// verify (kv/remote_block.h) are registered like computed ones, so the
// scheduler finds them as an ordinary prefix hit.
//
// A request with a segment-reuse planner also asks for the segment refs of
// every block-sized window of its prompt past the prefix (at most
// kMaxWindows), picks non-overlapping runs of windows found as the local
// matcher would (runs shorter than the request's minimum segment are left),
// asks for the blocks they name, and imports those that verify into the
// segment index: the planner then finds them as local segment hits, at any
// offset. Only whole blocks travel: a hit's single-token extensions into the
// blocks around it (kv/segment_match.h) need those neighbours here.
//
// Only the exact schemes' blocks travel (base and adapter lineages):
// shared-K/V lineages carry per-slot components (DroidSpeak owners, LRAgent's
// V without its LoRA term) that the tier does not keep, approximate blocks
// are never written, and the engine does not ask for requests with relay
// captures. Engine thread only, like the KV manager it imports into.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "agentkv/kv_remote.h"
#include "kv/block_observer.h"
#include "kv/kv_manager.h"
#include "kv/kv_storage.h"
#include "kv/remote_block.h"
#include "sched/scheduler.h"

namespace agentkv {

class RemoteTierClient {
 public:
  struct Config {
    KvRemoteTier* tier = nullptr;
    bool prefix_caching = true;
    double wait_s = 2.0;     // the longest a request waits for its answer
    uint64_t model_tag = 0;  // remote_model_tag(): the model, geometry and KV dtype
  };
  RemoteTierClient(const Config& c, KvManager* kv, KvStorage* storage);
  ~RemoteTierClient();

  // Told by the KV pool's prefix index of every block it registers (add it
  // to the pool's observers): the exact ones are written by flush().
  BlockObserver* recorder();
  // Writes the blocks registered since the last call (end of a step).
  void flush();
  // A fresh request that may find its prefix in the tier: asks for it and
  // returns true, and the request waits here until poll() hands it back;
  // false, with r untouched, when there is nothing to ask. `segments`: its
  // planner reuses segments, of at least `min_segment` tokens.
  bool lookup(SchedRequest* r, bool segments, int32_t min_segment);
  struct Polled {
    std::vector<SchedRequest*> ready;  // to schedule, in this order
    int64_t blocks_loaded = 0, bytes_loaded = 0, invalid = 0, timeouts = 0;
  };
  // Imports the blocks of the answers that came, and hands back their
  // requests and those whose wait is over. live(id): whether the request is
  // still live (a cancelled one is forgotten; its pointer may be gone).
  Polled poll(const std::function<bool(uint64_t)>& live);
  // Seconds one token row of the last step took: what a wait is capped by.
  void note_step(double s_per_token) {
    s_per_token_ = s_per_token_ > 0 ? 0.9 * s_per_token_ + 0.1 * s_per_token : s_per_token;
  }
  // Some request waits for an answer (the engine then polls every millisecond).
  bool waiting() const { return !wait_.empty(); }

 private:
  struct Stored {
    int32_t block;
    uint64_t hash, parent;
    std::vector<int32_t> tokens;
    std::string extra;  // key.extra, and parsed
    ExtraKeys keys;
  };
  struct Wait {
    SchedRequest* r = nullptr;  // valid only while the engine holds its id (a cancel frees it)
    double deadline = 0;
    int32_t from = 0;              // the blocks asked for start here
    int32_t min_segment = 0;       // the request's shortest reused segment, tokens
    std::vector<uint64_t> hashes;  // of every full block from 0
    // Segment reuse: after the prefix blocks, the segment refs of the
    // block-sized windows at these token offsets were asked for; then
    // (second answer) the blocks they name.
    std::vector<int32_t> windows;
    struct Picked {
      int32_t at = 0;  // token offset of the window
      RemoteSegmentRef ref;
    };
    std::vector<Picked> picked;  // non-empty: the second answer's blocks, in order
  };
  class Recorder;
  // The answer to a request's first ask: imports its prefix blocks and, for
  // segment reuse, asks for the blocks its segment refs name (true: asked
  // again, w stays waiting).
  bool prefix_answer(Wait& w, KvRemoteTier::Answer& a, Polled* out);
  // The second answer: imports the segment blocks that verify.
  void segment_answer(Wait& w, KvRemoteTier::Answer& a, Polled* out);

  Config c_;
  KvManager* kv_;
  KvStorage* storage_;
  int32_t block_size_;
  std::unique_ptr<Recorder> recorder_;
  std::vector<Stored> stored_;  // registered this step, to write
  bool importing_ = false;      // what the index registers now came from the tier
  std::unordered_map<uint64_t, Wait> wait_;
  double s_per_token_ = 0;
};

}  // namespace agentkv
