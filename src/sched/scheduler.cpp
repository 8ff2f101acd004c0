#include "sched/scheduler.h"

#include <algorithm>

namespace agentkv {

namespace {
// Tokens r may compute in one chunk from token `from` on, before the budget:
// the rest, cut where one_per_step_from starts feeding them one at a time.
int32_t next_chunk(const SchedRequest& r, int32_t from) {
  const int32_t rest = static_cast<int32_t>(r.tokens.size()) - from;
  if (r.one_per_step_from < 0) return rest;
  return std::min(rest, from >= r.one_per_step_from ? 1 : r.one_per_step_from - from);
}
}  // namespace

Scheduler::Scheduler(KvManager* kv, SchedulerConfig cfg, KvManager* pool_kv)
    : kv_(kv), pool_kv_(pool_kv), cfg_(cfg) {
  cfg_.max_batch_tokens = std::max(1, cfg_.max_batch_tokens);
  cfg_.max_running = std::max(1, cfg_.max_running);
}

void Scheduler::add(SchedRequest* r) {
  r->state = RequestState::kWaiting;
  r->n_computed = 0;
  all_[r->id] = r;
  if (r->background) {
    idle_.push_back(r);
  } else if (r->priority && cfg_.priority_streak > 0) {
    // Behind the priority requests (and preempted ones, at the head), ahead of the rest.
    auto it = std::find_if(waiting_.begin(), waiting_.end(),
                           [](const SchedRequest* w) { return !w->priority && w->n_preemptions == 0; });
    waiting_.insert(it, r);
  } else {
    waiting_.push_back(r);
  }
}

void Scheduler::pick_next() {
  if (cfg_.priority_streak <= 0 || waiting_.empty() || !waiting_.front()->priority ||
      streak_ < cfg_.priority_streak) {
    return;
  }
  auto other =
      std::find_if(waiting_.begin(), waiting_.end(), [](const SchedRequest* w) { return !w->priority; });
  if (other == waiting_.end()) return;
  SchedRequest* r = *other;
  waiting_.erase(other);
  waiting_.push_front(r);
}

SchedRequest* Scheduler::find(RequestId id) {
  auto it = all_.find(id);
  return it == all_.end() ? nullptr : it->second;
}

void Scheduler::free_kv(RequestId id) {
  if (kv_->has_request(id)) kv_->free(id);
  if (pool_kv_ != nullptr && pool_kv_->has_request(id)) pool_kv_->free(id);
}

bool Scheduler::allocate_to(SchedRequest* r, int32_t end) {
  const int32_t need = end - kv_->num_slots(r->id);
  if (need > 0 && !kv_->allocate_slots(r->id, need).is_ok()) return false;
  if (r->cache.has_pool() && pool_kv_ != nullptr) {
    const int32_t pool_need = end - pool_kv_->num_slots(r->id);
    if (pool_need > 0 && !pool_kv_->allocate_slots(r->id, pool_need).is_ok()) return false;
  }
  return true;
}

void Scheduler::preempt(SchedRequest* r, SchedulerOutput* out) {
  free_kv(r->id);
  r->n_computed = 0;
  r->prompt_end_work = 0;
  r->pending_work = 0;
  r->state = RequestState::kWaiting;
  ++r->n_preemptions;
  ++n_preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), r));
  waiting_.push_front(r);
  out->preempted.push_back(r->id);
}

void Scheduler::drop(SchedRequest* r, SchedulerOutput* out) {
  free_kv(r->id);
  if (auto it = std::find(running_.begin(), running_.end(), r); it != running_.end()) running_.erase(it);
  if (auto it = std::find(idle_.begin(), idle_.end(), r); it != idle_.end()) idle_.erase(it);
  out->dropped.push_back(r->id);
  ++n_dropped_;
  all_.erase(r->id);
}

bool Scheduler::ensure_slots(SchedRequest* r, int32_t end, SchedulerOutput* out) {
  for (;;) {
    if (allocate_to(r, end)) return true;
    // Out of blocks: the latest admitted background request is dropped, else
    // the latest admitted request gives its blocks back (a background
    // request never takes a foreground one's). Under a reserve a background
    // request keeps its blocks while r is not the only foreground request:
    // the latest admitted foreground request gives way (r itself, if it is
    // the latest; the earlier ones run on and finish). When r is the only
    // one, the background request goes after all, so that r never loses to
    // each next re-run forever.
    SchedRequest* victim = nullptr;
    if (reserve_active_ && !r->background &&
        std::any_of(running_.begin(), running_.end(),
                    [r](const SchedRequest* o) { return !o->background && o != r; })) {
      for (auto it = running_.rbegin(); it != running_.rend() && victim == nullptr; ++it) {
        if (!(*it)->background) victim = *it;
      }
    }
    for (auto it = running_.rbegin(); it != running_.rend() && victim == nullptr; ++it) {
      if ((*it)->background) victim = *it;
    }
    if (victim == nullptr) victim = r->background ? r : running_.back();
    const bool self = victim == r;
    if (victim->background) {
      drop(victim, out);
    } else {
      preempt(victim, out);
    }
    if (self) return false;
  }
}

int32_t Scheduler::admit(std::deque<SchedRequest*>& queue, int32_t budget, SchedulerOutput* out) {
  SchedRequest* r = queue.front();
  KvBlocks hit, pool_hit;
  const bool pool = r->cache.has_pool() && pool_kv_ != nullptr;
  if (cfg_.prefix_caching && r->read_cache) {
    hit = r->cache.lookup(*kv_, r->tokens);
    // The component's prefix counts only as far as the K/V's: past it the
    // K/V is computed anyway, and the component with it.
    if (pool)
      pool_hit =
          r->cache.lookup_pool(*pool_kv_, std::span<const int32_t>(r->tokens.data(), hit.n_tokens() + 1));
  }
  const int32_t n_hit = hit.n_tokens();
  const int32_t start = pool ? pool_hit.n_tokens() : n_hit;
  const int32_t n = std::min(next_chunk(*r, start), budget);
  bool ok = kv_->allocate_slots(r->id, std::max(0, start + n - n_hit), hit).is_ok();
  if (ok && pool) {
    ok = pool_kv_->allocate_slots(r->id, n, pool_hit).is_ok();
    if (!ok) kv_->free(r->id);
  }
  if (!ok) {
    if (running_.empty() && out->seqs.empty()) {
      // The whole pool is free or evictable and still too small for this
      // request's next chunk: it can never run.
      queue.pop_front();
      out->aborted.push_back(r->id);
      all_.erase(r->id);
    }
    return 0;
  }
  queue.pop_front();
  r->state = RequestState::kRunning;
  r->n_computed = start;
  r->kv_hit_tokens = n_hit;
  if (r->n_cached_prompt < 0) {
    r->n_cached_prompt = n_hit;
    n_hit_tokens_ += n_hit;
  }
  running_.push_back(r);
  out->seqs.push_back({r, start, n, start + n == static_cast<int32_t>(r->tokens.size())});
  return n;
}

bool Scheduler::schedule_running(bool background, int32_t* budget, SchedulerOutput* out) {
  // A snapshot: ensure_slots may preempt or drop requests of running_. Only
  // later ones of this priority, or background ones, which a foreground
  // pass does not visit; membership is checked by pointer before use.
  std::vector<SchedRequest*> order;
  for (SchedRequest* r : running_) {
    if (r->background == background) order.push_back(r);
  }
  for (SchedRequest* r : order) {
    if (*budget <= 0) break;
    if (std::find(running_.begin(), running_.end(), r) == running_.end()) continue;
    if (r->pending_work > 0) {
      // Rows of tokens it already has slots for: no tokens, no sampling.
      const int32_t w = std::min(r->pending_work, *budget);
      out->seqs.push_back({r, r->n_computed, 0, false, w});
      *budget -= w;
      continue;
    }
    const int32_t n = std::min(next_chunk(*r, r->n_computed), *budget);
    if (n <= 0) continue;
    if (!ensure_slots(r, r->n_computed + n, out))
      return false;  // r gave its own blocks back: it was the last
    const int32_t end = r->n_computed + n;
    const int32_t work = end == r->n_prompt && r->n_computed < r->n_prompt ? r->prompt_end_work : 0;
    out->seqs.push_back({r, r->n_computed, n, end == static_cast<int32_t>(r->tokens.size()), work});
    *budget -= n + work;
  }
  return true;
}

int32_t Scheduler::n_background_running() const {
  return static_cast<int32_t>(
      std::count_if(running_.begin(), running_.end(), [](const SchedRequest* r) { return r->background; }));
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  const int32_t n_bg = n_background_running();
  // Rows held back for background work while there is some.
  const int32_t reserve =
      idle_.empty() && n_bg == 0 ? 0 : std::clamp(cfg_.background_reserve, 0, cfg_.max_batch_tokens - 1);
  reserve_active_ = reserve > 0;
  int32_t budget = cfg_.max_batch_tokens - reserve;
  schedule_running(/*background=*/false, &budget, &out);
  // As vLLM: no admissions in a step that had to preempt. Background
  // requests do not count against max_running.
  while (out.preempted.empty() && !waiting_.empty() && budget > 0 &&
         n_running() - n_background_running() < cfg_.max_running) {
    const size_t n_aborted = out.aborted.size();
    pick_next();
    SchedRequest* const next = waiting_.front();
    const int32_t n = admit(waiting_, budget, &out);
    if (n > 0) {
      budget -= n;
      const bool others_wait =
          std::any_of(waiting_.begin(), waiting_.end(), [](const SchedRequest* w) { return !w->priority; });
      streak_ = next->priority && others_wait ? streak_ + 1 : 0;
    } else if (out.aborted.size() == n_aborted) {
      // No room: a background request gives its blocks first, else wait
      // until something finishes. With a reserve its blocks are reserved
      // too: admissions wait for them.
      if (reserve > 0) break;
      SchedRequest* bg = nullptr;
      for (auto it = running_.rbegin(); it != running_.rend() && bg == nullptr; ++it) {
        if ((*it)->background) bg = *it;
      }
      if (bg == nullptr) break;
      drop(bg, &out);
    }
  }
  // Background requests: the reserve, plus what the others left of the
  // step, at most max(background_rows, reserve) while any of them is active.
  bool others = !waiting_.empty();
  for (const SchedRequest* r : running_) others |= !r->background;
  int32_t rest = others ? std::max(reserve, std::min(budget + reserve, std::max(0, cfg_.background_rows)))
                        : budget + reserve;
  if (!schedule_running(/*background=*/true, &rest, &out)) return out;
  // Admitted when no other request waits and a queue slot is free; with a
  // reserve, one at a time whatever waits.
  const auto may_admit = [&] {
    if (reserve > 0 && n_background_running() == 0) return true;
    return waiting_.empty() && n_running() < cfg_.max_running;
  };
  while (out.preempted.empty() && out.dropped.empty() && !idle_.empty() && rest > 0 && may_admit()) {
    const size_t n_aborted = out.aborted.size();
    const int32_t n = admit(idle_, rest, &out);
    if (n > 0) {
      rest -= n;
    } else if (out.aborted.size() == n_aborted) {
      break;
    }
  }
  return out;
}

void Scheduler::on_step_done(const SchedulerOutput& out) {
  for (const ScheduledSeq& s : out.seqs) {
    SchedRequest* r = s.req;
    r->n_computed = s.begin + s.n;
    if (cfg_.prefix_caching) {
      const std::span<const int32_t> computed(r->tokens.data(), r->n_computed);
      r->cache.commit(*kv_, r->id, computed);
      if (r->cache.has_pool() && pool_kv_ != nullptr) r->cache.commit_pool(*pool_kv_, r->id, computed);
    }
  }
}

void Scheduler::append_token(RequestId id, int32_t token) {
  if (SchedRequest* r = find(id)) r->tokens.push_back(token);
}

void Scheduler::finish(RequestId id) {
  SchedRequest* r = find(id);
  if (!r) return;
  if (auto it = std::find(waiting_.begin(), waiting_.end(), r); it != waiting_.end()) waiting_.erase(it);
  if (auto it = std::find(idle_.begin(), idle_.end(), r); it != idle_.end()) idle_.erase(it);
  if (auto it = std::find(running_.begin(), running_.end(), r); it != running_.end()) running_.erase(it);
  free_kv(id);
  all_.erase(id);
}

}  // namespace agentkv
