// Continuous batching with chunked prefill (vLLM v1's scheduler, reduced):
// every step spends at most max_batch_tokens token rows, first on running
// requests in arrival order (one decode token each, the next prefill chunk,
// or a share of work the engine left pending: SchedRequest::pending_work),
// then on waiting requests FCFS (priority ones first, SchedRequest::priority),
// each admitted with its longest cached prefix. When the pool cannot supply blocks, the most recently
// admitted running request is preempted: its blocks are freed (they stay
// cached, so the recompute usually hits) and it goes back to the head of the
// queue with all its tokens, to be recomputed later. Nothing is dropped,
// except background requests (SchedRequest::background): they wait in a
// queue of their own, run on what the others leave of a step (at most
// background_rows of it while any other request is active) plus the rows
// held back for them (background_reserve), and give their blocks back by
// being dropped: first, without a reserve; with one, only when no other
// foreground request can give way (SchedulerConfig::background_reserve).
//
// Single-threaded: the engine thread owns it.
#pragma once

#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "kv/kv_manager.h"
#include "sched/request.h"
#include "util/status.h"

namespace agentkv {

struct SchedulerConfig {
  int32_t max_batch_tokens = 512;  // token rows per step
  int32_t max_running = 64;        // sequences per step
  bool prefix_caching = true;
  // Token rows per step that background requests may take while any other
  // request runs or waits (all of what is left when none does).
  int32_t background_rows = 32;
  // Token rows per step held back from the other requests for background
  // work, whenever some exists, so that it runs under a load that never
  // leaves rows (or a queue slot, or blocks) over. With it > 0 one
  // background request is admitted while others wait, beside max_running;
  // admissions wait for its blocks, and a running request short of blocks
  // preempts the latest admitted foreground request (itself, if it is the
  // latest) while another foreground request runs, and drops the
  // background one only when it is the only foreground request left. 0:
  // background work runs only in what the load leaves, and is dropped
  // first. Clamped to max_batch_tokens - 1.
  int32_t background_reserve = 0;
  // SchedRequest::priority requests admitted in a row while another waits,
  // before that one goes (so the others are delayed, never starved); 0:
  // priority is ignored (FCFS).
  int32_t priority_streak = 4;
};

// One sequence's share of a step: compute tokens [begin, begin + n).
struct ScheduledSeq {
  SchedRequest* req = nullptr;
  int32_t begin = 0;
  int32_t n = 0;
  bool sample = false;  // the chunk ends at the last token: sample the next one
  // Token rows of work beyond the n tokens (SchedRequest::prompt_end_work,
  // or a share of pending_work with n == 0); counted in the step's budget.
  int32_t work = 0;
};

struct SchedulerOutput {
  std::vector<ScheduledSeq> seqs;
  std::vector<RequestId> preempted;  // sent back to the queue this step
  // Requests that can never run: alone they need more blocks than the pool
  // has. The engine finishes them (error, or "length" if they have output);
  // they are already out of the scheduler.
  std::vector<RequestId> aborted;
  // Background requests dropped to free blocks for others: out of the
  // scheduler already; the engine ends them with an error.
  std::vector<RequestId> dropped;
  int32_t n_tokens() const {
    int32_t t = 0;
    for (const auto& s : seqs) t += s.n;
    return t;
  }
  // Token rows: the tokens plus the extra work.
  int32_t n_work() const {
    int32_t t = 0;
    for (const auto& s : seqs) t += s.n + s.work;
    return t;
  }
};

class Scheduler {
 public:
  // pool_kv: the pool of a KV component that has blocks of its own, for
  // requests whose SchedRequest::cache has a pool; null when there is none.
  Scheduler(KvManager* kv, SchedulerConfig cfg, KvManager* pool_kv = nullptr);

  // Queues a request (state kWaiting, n_computed 0, tokens non-empty). The
  // caller bounds the queue; the scheduler accepts anything. The caller owns
  // the request (the engine's request state extends SchedRequest) and keeps
  // it alive until it calls finish(), or until a step reports it aborted or
  // dropped: the scheduler has forgotten it then.
  void add(SchedRequest* req);

  // Plans the next step. Allocates the KV slots it needs (evicting cached
  // blocks, preempting when that is not enough).
  SchedulerOutput schedule();

  // After the runner executed `out`: advances n_computed and registers the
  // blocks that filled up in the prefix index.
  void on_step_done(const SchedulerOutput& out);

  // A token sampled for the request (it runs in the next step).
  void append_token(RequestId id, int32_t token);

  // Removes the request (finished or cancelled) and frees its blocks; they
  // stay cached. Unknown ids are ignored.
  void finish(RequestId id);

  SchedRequest* find(RequestId id);
  int32_t n_waiting() const { return static_cast<int32_t>(waiting_.size()); }  // background ones apart
  int32_t n_background_waiting() const { return static_cast<int32_t>(idle_.size()); }
  int32_t n_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t n_background_running() const;
  bool has_work() const { return !waiting_.empty() || !idle_.empty() || !running_.empty(); }
  int64_t n_dropped() const { return n_dropped_; }
  int64_t n_preemptions() const { return n_preemptions_; }
  int64_t n_prefix_hit_tokens() const { return n_hit_tokens_; }
  const SchedulerConfig& config() const { return cfg_; }

 private:
  // Makes the request's slots reach `end` tokens, preempting from the back of
  // running_ as needed. False if the request itself had to be preempted.
  bool ensure_slots(SchedRequest* r, int32_t end, SchedulerOutput* out);
  void preempt(SchedRequest* r, SchedulerOutput* out);
  // Moves the next request to admit to waiting_.front() (priority ones
  // first, within the streak bound).
  void pick_next();
  // Admits queue.front() with up to `budget` tokens; 0 if it cannot.
  int32_t admit(std::deque<SchedRequest*>& queue, int32_t budget, SchedulerOutput* out);
  // Out of the scheduler, blocks freed, listed in out->dropped.
  void drop(SchedRequest* r, SchedulerOutput* out);
  // Schedules running_'s requests of one priority; false when one of them
  // had to preempt itself (the step is full).
  bool schedule_running(bool background, int32_t* budget, SchedulerOutput* out);

  // Slots up to `end` tokens in both pools; false, with nothing changed in
  // the component pool, when either is short.
  bool allocate_to(SchedRequest* r, int32_t end);
  void free_kv(RequestId id);

  KvManager* kv_;
  KvManager* pool_kv_;
  SchedulerConfig cfg_;
  std::unordered_map<RequestId, SchedRequest*> all_;  // not owned
  std::deque<SchedRequest*> waiting_;
  std::deque<SchedRequest*> idle_;      // waiting background requests
  std::vector<SchedRequest*> running_;  // admission order
  int64_t n_preemptions_ = 0;
  int64_t n_dropped_ = 0;
  int64_t n_hit_tokens_ = 0;
  int32_t streak_ = 0;           // priority admissions in a row while another request waited
  bool reserve_active_ = false;  // this step holds rows back for background work
};

}  // namespace agentkv
