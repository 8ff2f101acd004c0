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
    ev.reused_tokens = l.reused_tokens;
    ev.prefill_token_layers = l.prefill_token_layers;
    ev.reuse_rate = reuse_rate(l, ev.cached_tokens);
    ev.kv_sharing = l.plan->sharing().scheme;
    ev.queue_s = l.queue_s;
    ev.ttft_s = l.ttft_s;
    ev.prompt_logprobs = std::move(l.prompt_lps);
    count_prompt(l, ev);
  }
  if (l.return_logits) ev.logits.assign(logits.begin(), logits.end());
  const bool forced = static_cast<size_t>(l.n_generated) < l.forced.size();
  const bool constrained = l.matcher && !forced;
  if (constrained && !l.mask_ready) fill_mask(l, (logits.size() + 31) / 32);  // not planned as a sampled row
  SampleResult sr = forced ? logprobs_of(logits, l.forced[l.n_generated], l.sampler.params().n_logprobs)
                           : l.sampler.sample(logits, constrained ? l.mask.data() : nullptr);
  if (constrained) {
    l.mask_ready = false;
    if (sr.id < 0 || ((l.mask[static_cast<size_t>(sr.id) >> 5] >> (sr.id & 31)) & 1u) == 0) {
      ev.error = "the grammar allows no next token";
      finish(id, ServeFinish::kError, std::move(ev));
      return;
    }
  }
  const bool stop_id =
      std::find(l.stop_token_ids.begin(), l.stop_token_ids.end(), sr.id) != l.stop_token_ids.end();
  // Under a grammar an end-of-generation token is the grammar's own end
  // (the mask allows it only there), so it ends the request even with ignore_eos.
  if (stop_id || ((!l.ignore_eos || constrained) && tokenizer_->is_eog(sr.id))) {
    finish(id, ServeFinish::kStop, std::move(ev));
    return;
  }
  if (constrained && !l.matcher->accept(sr.id)) {
    ev.error = "the grammar refused the sampled token";
    finish(id, ServeFinish::kError, std::move(ev));
    return;
  }
  ++l.n_generated;
  const int32_t token = sr.id;
  l.sampler.accept(token);
  ev.samples.push_back(std::move(sr));
  ev.text = l.stops.push(l.detok.push(token));
  if (l.stops.stopped()) {
    finish(id, ServeFinish::kStop, std::move(ev));
  } else if (l.n_generated >= l.max_tokens || static_cast<int64_t>(r->tokens.size()) + 1 >= max_model_len_) {
    // prompt + completion (this token included) has reached max_model_len.
    finish(id, ServeFinish::kLength, std::move(ev));
  } else {
    sched_->append_token(id, token);
    l.sink(std::move(ev));
  }
}

void ServingEngineImpl::fill_mask(Live& l, size_t words) {
  l.mask.resize(words);
  l.matcher->fill_mask(l.mask);
  l.mask_ready = true;
}

void ServingEngineImpl::finish(ServeId id, ServeFinish why, ServeEvent ev) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  Live& l = *it->second;
  if (!segment_jobs_.empty()) finish_segment_job(id, why, ev.error);
  if (why != ServeFinish::kError && why != ServeFinish::kCancelled && !l.stops.stopped()) {
    ev.text += l.stops.push(l.detok.flush()) + l.stops.flush();
  }
  ev.finish = why;
  ev.prompt_tokens = l.n_prompt;
  ev.cached_tokens = std::max(0, l.n_cached_prompt);  // also for one the scheduler already dropped
  ev.reused_tokens = l.reused_tokens;
  ev.prefill_token_layers = l.prefill_token_layers;
  ev.reuse_rate = reuse_rate(l, ev.cached_tokens);
  ev.completion_tokens = l.n_generated;
  ev.kv_sharing = l.plan->sharing().scheme;
  ev.lr_fallback = l.plan->sharing().lr_fallback;
  ev.queue_s = l.queue_s;
  ev.ttft_s = l.ttft_s;
  const bool was_queued = !l.scheduled;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!l.background) stats_.per_model[l.model].completion_tokens += l.n_generated;
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
