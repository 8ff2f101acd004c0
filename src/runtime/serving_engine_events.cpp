// The serving engine's results (serving_engine.cpp runs the steps): a
// logits row turned into a sampled token (under the request's grammar, stops
// and limits) or a prompt logprob, the client's events, the stats, and a
// request's finish.
#include "kv/remote_block.h"
#include "runtime/serving_engine_impl.h"

namespace agentkv {

void ServingEngineImpl::on_prompt_logits(ServeId id, int32_t pos, std::span<const float> logits) {
  auto it = live_.find(id);
  SchedRequest* r = sched_->find(id);
  if (it == live_.end() || r == nullptr) return;
  Live& l = *it->second;
  // A recompute after preemption scores the same positions again: keep the first.
  if (pos < 0 || static_cast<size_t>(pos) >= l.prompt_lps.size() || l.prompt_lps[pos].id >= 0) return;
  l.prompt_lps[pos] = logprobs_of(logits, r->tokens[pos + 1], l.prompt_logprobs);
}

void ServingEngineImpl::count_prompt(const Live& l, const ServeEvent& ev) {
  if (l.background) return;
  std::lock_guard<std::mutex> lk(mu_);
  stats_.prompt_tokens += l.n_prompt;
  AdapterStats& m = stats_.per_model[l.model];
  ++m.requests;
  m.prompt_tokens += l.n_prompt;
  m.cached_tokens += ev.cached_tokens;
  stats_.prompt_tokens_by_scheme[l.plan->sharing().scheme] += l.n_prompt;
  stats_.cached_tokens_by_scheme[l.plan->sharing().scheme] += ev.cached_tokens;
  stats_.reused_tokens_by_scheme[l.plan->sharing().scheme] += ev.reused_tokens;
  if (ev.reused_tokens > 0)
    stats_.reused_token_layers_by_scheme[l.plan->sharing().scheme] += reused_entries(l, ev.cached_tokens);
}

void ServingEngineImpl::on_logits(ServeId id, std::span<const float> logits) {
  auto it = live_.find(id);
  SchedRequest* r = sched_->find(id);
  if (it == live_.end() || r == nullptr) return;
  Live& l = *it->second;
  ServeEvent ev;
  if (!l.first_sent) {
    l.first_sent = true;
    l.ttft_s = seconds(l.submitted, Clock::now());
    ev.prompt_tokens = l.n_prompt;
    ev.cached_tokens = std::max(0, r->n_cached_prompt);
    ev.reused_tokens = l.reuse.reused_tokens;
    ev.prefill_token_layers = l.prefill_token_layers;
    ev.reuse_rate = reuse_rate(l, ev.cached_tokens);
    ev.kv_sharing = l.plan->sharing().scheme;
    ev.queue_s = l.queue_s;
    ev.ttft_s = l.ttft_s;
    ev.prompt_logprobs = std::move(l.prompt_lps);
    count_prompt(l, ev);
  }
  if (l.return_logits) ev.logits.assign(logits.begin(), logits.end());
  const ServeFinish why = l.out.next(logits, *tokenizer_, static_cast<int64_t>(r->tokens.size()), max_model_len_, &ev);
  if (why != ServeFinish::kNone) {
    finish(id, why, std::move(ev));
    return;
  }
  sched_->append_token(id, ev.samples.back().id);
  l.sink(std::move(ev));
}

void ServingEngineImpl::finish(ServeId id, ServeFinish why, ServeEvent ev) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  Live& l = *it->second;
  // A segment's prefill: its blocks are pinned, and the stats show the
  // segment right after create_segment returns.
  segment_jobs_.finish(id, why, ev.error, *kv_, [this] { publish_stats(); });
  ev.text += l.out.flush(why);
  ev.finish = why;
  ev.prompt_tokens = l.n_prompt;
  ev.cached_tokens = std::max(0, l.n_cached_prompt);  // also for one the scheduler already dropped
  ev.reused_tokens = l.reuse.reused_tokens;
  ev.prefill_token_layers = l.prefill_token_layers;
  ev.reuse_rate = reuse_rate(l, ev.cached_tokens);
  ev.completion_tokens = l.out.n_generated();
  ev.kv_sharing = l.plan->sharing().scheme;
  ev.lr_fallback = l.plan->sharing().lr_fallback;
  ev.queue_s = l.queue_s;
  ev.ttft_s = l.ttft_s;
  const bool was_queued = !l.scheduled;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!l.background) stats_.per_model[l.model].completion_tokens += l.out.n_generated();
    if (l.plan->sharing().lr_fallback && !l.background) ++stats_.lr_fallback_requests;
  }
  l.defer.release();
  if (!l.session_key.empty()) {
    // The session keeps the request's blocks in both pools: K/V, and the LR
    // cache's (LRAgent) when it held some.
    const double expires = clock_seconds() + l.session_retention_s;
    kv_->keep_for_session(id, l.session_key, expires);
    if (lr_kv_) lr_kv_->keep_for_session(id, l.session_key, expires);
  }
  sched_->finish(id);
  // Before the last event and before drain() can see the request gone: a
  // client that reads the stats (/metrics) once its answer is in sees its
  // blocks cached and its session's protection.
  publish_stats();
  l.sink(std::move(ev));
  live_.erase(it);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (was_queued) --n_queued_;
    --n_live_;
  }
  idle_.notify_all();
}

}  // namespace agentkv
