// The serving engine: one thread that turns the scheduler's plans into runner
// Steps and the runner's logits into tokens and client events. Submissions,
// cancellations and drains come from other threads through a small inbox.
#include "runtime/serving_engine_impl.h"

namespace agentkv {

void ServingEngineImpl::flush_kv_events() {
  if (!kv_events_ || !kv_events_->has_events()) return;
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  opts_.kv_events(kv_events_->take(now));
}

std::vector<std::optional<std::string>> ServingEngineImpl::lineage_readers(const std::string& lineage) const {
  std::vector<std::optional<std::string>> out;
  const std::vector<AdapterRegistry::Brief> adapters = adapters_.briefs();
  if (lineage.empty() || lineage.starts_with("shared:")) {
    // The base lineage: the base writes it, and the adapters the default
    // scheme lets read it follow. A shared lineage: whichever models the
    // scheme lets read and write it, the base first when it is one.
    const std::string_view tag = lineage.empty() ? std::string_view() : std::string_view(lineage).substr(7);
    if (lineage.empty() || default_scheme_->reads_lineage(std::nullopt, tag)) out.push_back(std::nullopt);
    for (const AdapterRegistry::Brief& a : adapters) {
      if (!opts_.kv_event_aliases && !out.empty()) break;
      if (default_scheme_->reads_lineage(a.kind, tag)) out.push_back(a.name);
    }
    return out;
  }
  for (const AdapterRegistry::Brief& a : adapters) {
    if (a.id == lineage) out.push_back(a.name);
    if (!opts_.kv_event_aliases && !out.empty()) break;
  }
  if (out.empty()) out.push_back(lineage);  // its adapter is unloaded: named by its content id
  return out;
}

Status ServingEngineImpl::check_request(const ServeRequest& req) const {
  if (req.prompt.empty()) return make_error(ErrorCode::kInvalidArgument, "the prompt is empty");
  for (int32_t t : req.prompt) {
    if (t < 0 || t >= model_->spec.n_vocab) {
      return make_error(ErrorCode::kInvalidArgument, "token id ", t, " is outside the vocabulary (", model_->spec.n_vocab,
                        " tokens)");
    }
  }
  for (int32_t t : req.stop_token_ids) {
    if (t < 0 || t >= model_->spec.n_vocab) {
      return make_error(ErrorCode::kInvalidArgument, "stop_token_ids: token id ", t, " is outside the vocabulary (",
                        model_->spec.n_vocab, " tokens)");
    }
  }
  AKV_RETURN_IF_ERROR(req.sampling.validate(model_->spec.n_vocab));
  if (req.max_tokens < 1) return make_error(ErrorCode::kInvalidArgument, "max_tokens must be >= 1");
  const int64_t n_prompt = static_cast<int64_t>(req.prompt.size());
  if (n_prompt >= max_model_len_) {
    return make_error(ErrorCode::kOutOfRange, "this model's maximum context length is ", max_model_len_,
                      " tokens; the prompt has ", n_prompt, " (at least one more is needed to generate)");
  }
  const int64_t blocks_needed = (n_prompt + 1 + opts_.block_size - 1) / opts_.block_size;
  if (blocks_needed > kv_->pool().n_blocks()) {
    return make_error(ErrorCode::kOutOfRange, "the prompt needs ", blocks_needed, " KV blocks but the pool has ",
                      kv_->pool().n_blocks(), "; raise --kv-cache-mb");
  }
  return Status::ok();
}

Result<ServeId> ServingEngineImpl::submit(ServeRequest req, ServeSink sink) {
  AKV_RETURN_IF_ERROR(check_request(req));
  std::shared_ptr<const Adapter> adapter;
  if (!req.adapter.empty()) {
    adapter = adapters_.find(req.adapter);
    if (!adapter) return make_error(ErrorCode::kNotFound, "no adapter named '", req.adapter, "' is loaded");
  }
  const SharingScheme* scheme = default_scheme_;
  if (!req.kv_sharing.empty()) {
    AKV_ASSIGN_OR_RETURN(scheme, sharing_scheme_find(req.kv_sharing));
  }
  AKV_RETURN_IF_ERROR(scheme->check_params(req.kv_sharing_params));
  // Unset parameters take the engine's defaults (planners read only their
  // own), then the model's defaults for the scheme, then the scheme's own.
  const KvSharingParams params =
      resolve_params(req.kv_sharing_params, opts_.kv_sharing_params, scheme_defaults_, *scheme);
  AKV_RETURN_IF_ERROR(scheme->check_model(params, model_->spec.n_layers));
  // Prompt logprobs need every prompt row computed: no segment reuse there.
  PlanContext pc{adapter.get(), req.prompt, &params, adapter ? adapters_.shared_a_peers(*adapter) : 0,
                 /*segment_reuse=*/req.prompt_logprobs < 0};
  AKV_ASSIGN_OR_RETURN(std::unique_ptr<SeqPlanner> plan, scheme->admit(pc));
  const SeqSharing& sharing = plan->sharing();
  if (!sharing.lr_lineage.empty()) {
    if (!lr_kv_) {
      return make_error(ErrorCode::kInvalidArgument, "kv_sharing '", sharing.scheme,
                        "' needs the LR cache, and this server has none; start it with --lr-cache-rank > 0");
    }
    const int32_t width = lr_storage_->geometry().width;
    for (const LoraLayer& ly : adapter->layers) {
      if (ly.at(LoraTarget::kV).rank > width) {
        return make_error(ErrorCode::kInvalidArgument, "adapter '", adapter->name, "' has v_proj rank ",
                          ly.at(LoraTarget::kV).rank, ", above the LR cache's ", width,
                          "; restart the server with --lr-cache-rank ", ly.at(LoraTarget::kV).rank,
                          " or more");
      }
    }
  }
  const int32_t min_segment = params.min_segment_tokens.value_or(2 * opts_.block_size);
  const bool capture = captures_.wants(*plan);
  if (req.prompt_logprobs > SamplingParams::kMaxLogprobs) {
    return make_error(ErrorCode::kInvalidArgument, "prompt_logprobs must be at most ", SamplingParams::kMaxLogprobs);
  }
  if (req.prompt_logprobs >= 0 && sharing.decoder_row) {
    // Prompt rows run as the base encoder: their logits are not the adapter's.
    return make_error(ErrorCode::kInvalidArgument,
                      "prompt logprobs (echo with logprobs) are not available for an "
                      "ICaRus adapter: its prompt rows run as the base encoder");
  }
  // The request's one state, made here and handed to the engine thread.
  auto l = std::make_unique<Live>(std::move(sink), req, *tokenizer_, Clock::now());
  l->adapter = std::move(adapter);
  ExtraKeys own;
  own.tenant = req.tenant;
  own.cache_salt = req.cache_salt;
  l->cache = plan->cache_policy(own, opts_.block_size);
  l->plan = std::move(plan);
  l->model = req.adapter;
  l->reuse.min_segment = min_segment;
  l->capture = capture;
  ServeId id;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (draining_ || stopping_) return make_error(ErrorCode::kUnavailable, "the server is shutting down");
    if (n_queued_ >= opts_.max_queue) {
      return make_error(ErrorCode::kResourceExhausted, "the queue is full (", opts_.max_queue,
                        " waiting requests); retry later");
    }
    id = next_id_++;
    l->id = id;
    ++n_queued_;
    ++n_live_;
    inbox_.push_back(std::move(l));
  }
  wake_.notify_one();
  return id;
}

void ServingEngineImpl::cancel(ServeId id) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    cancels_.push_back(id);
  }
  wake_.notify_one();
}

bool ServingEngineImpl::drain(double timeout_s) {
  std::unique_lock<std::mutex> lk(mu_);
  draining_ = true;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  const bool in_time = idle_.wait_until(lk, deadline, [&] { return n_live_ == 0; });
  if (!in_time) {
    cancel_all_ = true;
    wake_.notify_one();
    idle_.wait(lk, [&] { return n_live_ == 0; });
  }
  return in_time;
}

ServingStats ServingEngineImpl::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  ServingStats s = stats_;
  s.n_waiting += static_cast<int32_t>(inbox_.size());
  return s;
}

void ServingEngineImpl::publish_stats() {
  const KvUsage u = kv_->usage();
  std::lock_guard<std::mutex> lk(mu_);
  stats_.n_waiting = sched_->n_waiting();
  stats_.n_running = sched_->n_running();
  stats_.kv_blocks_used = u.n_used;
  stats_.kv_blocks_cached = u.n_cached;
  stats_.live_sessions = kv_->sessions().n_live();
  stats_.protected_blocks = kv_->pool().n_protected();
  stats_.protected_hits = kv_->pool().protected_hits();
  stats_.prefix_blocks = kv_->pool().index().size();
  stats_.kv_event_hashes = kv_events_ ? kv_events_->n_hashes() : 0;
  stats_.kv_blocks_free = u.n_free;
  stats_.kv_blocks_total = u.n_total;
  stats_.prefix_hit_tokens = sched_->n_prefix_hit_tokens();
  stats_.preemptions = sched_->n_preemptions();
  stats_.frozen_segments = kv_->frozen().n_frozen();
  stats_.frozen_blocks = kv_->frozen().n_pinned_blocks();
  stats_.segment_evictions = kv_->frozen().n_evictions();
  if (lr_kv_) {
    const KvUsage lu = lr_kv_->usage();
    stats_.lr_blocks_used = lu.n_used;
    stats_.lr_blocks_cached = lu.n_cached;
    stats_.lr_blocks_total = lu.n_total;
    stats_.lr_blocks_protected = lr_kv_->pool().n_protected();
  }
}

void ServingEngineImpl::take_inbox(std::vector<std::unique_ptr<Live>>* fresh, std::vector<ServeId>* cancels,
                                   bool* cancel_all) {
  std::unique_lock<std::mutex> lk(mu_);
  auto ready = [&] {
    return stopping_ || cancel_all_ || !inbox_.empty() || !cancels_.empty() || !tasks_.empty() || sched_->has_work();
  };
  if (!remote_ || !remote_->waiting()) {
    wake_.wait(lk, ready);
  } else {
    wake_.wait_for(lk, std::chrono::milliseconds(1), ready);  // answers and deadlines of the remote tier
  }
  fresh->swap(inbox_);
  cancels->swap(cancels_);
  *cancel_all = cancel_all_;
  cancel_all_ = false;
}

void ServingEngineImpl::admit(std::unique_ptr<Live> lp) {
  Live* l = lp.get();
  // An agent back from a tool: its turn goes ahead while its blocks are protected.
  l->priority = !l->session_key.empty() && kv_->sessions().contains(l->session_key);
  // Ids are never reused (next_id_), so the id is new to live_.
  live_.emplace(l->id, std::move(lp));
  // Relay captures (l->capture) never ask: the tier holds no captured state.
  if (remote_ && !l->capture && remote_->lookup(l, l->plan->reuses_segments(), l->reuse.min_segment)) {
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.remote_lookups;
    return;
  }
  sched_->add(l);
}

void ServingEngineImpl::settle(const SchedulerOutput& out) {
  // A preempted request recomputes from scratch, exactly: its deferred
  // rows' state goes with its blocks.
  for (RequestId id : out.preempted) {
    if (auto it = live_.find(id); it != live_.end()) it->second->defer.release();
  }
  for (RequestId id : out.dropped) {
    auto it = live_.find(id);
    if (it == live_.end()) continue;
    it->second->defer.release();
    ServeEvent ev;
    ev.error = "dropped: a background request gives its KV blocks to others first";
    finish(id, ServeFinish::kError, std::move(ev));
  }
  for (RequestId id : out.aborted) {
    ServeEvent ev;
    auto it = live_.find(id);
    if (it != live_.end() && it->second->out.n_generated() > 0) {
      finish(id, ServeFinish::kLength);
    } else {
      ev.error = "the request does not fit in the KV cache (" + std::to_string(kv_->pool().n_blocks()) +
                 " blocks of " + std::to_string(opts_.block_size) + " tokens); raise --kv-cache-mb";
      finish(id, ServeFinish::kError, std::move(ev));
    }
  }
}

void ServingEngineImpl::poll_remote() {
  RemoteTierClient::Polled p = remote_->poll([this](uint64_t id) { return live_.count(id) > 0; });
  for (SchedRequest* r : p.ready) sched_->add(r);
  if (p.blocks_loaded + p.invalid + p.timeouts > 0) {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.remote_blocks_loaded += p.blocks_loaded;
    stats_.remote_bytes_loaded += p.bytes_loaded;
    stats_.remote_invalid += p.invalid;
    stats_.remote_timeouts += p.timeouts;
  }
}

void ServingEngineImpl::loop() {
  std::vector<std::unique_ptr<Live>> fresh;
  std::vector<ServeId> cancels;
  for (;;) {
    bool cancel_all = false;
    fresh.clear();
    cancels.clear();
    take_inbox(&fresh, &cancels, &cancel_all);
    run_tasks();
    flush_kv_events();  // segments created or deleted
    kv_->sessions().expire(clock_seconds());
    if (lr_kv_) lr_kv_->sessions().expire(clock_seconds());
    for (std::unique_ptr<Live>& l : fresh) admit(std::move(l));
    if (remote_) poll_remote();
    for (ServeId id : cancels) finish(id, ServeFinish::kCancelled);
    if (cancel_all) {
      std::vector<ServeId> ids;
      for (const auto& [id, l] : live_) ids.push_back(id);
      for (ServeId id : ids) finish(id, ServeFinish::kCancelled);
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (stopping_ && live_.empty() && inbox_.empty() && tasks_.empty()) break;
    }
    if (!sched_->has_work()) {
      publish_stats();
      continue;
    }
    SchedulerOutput out = sched_->schedule();
    settle(out);
    if (!out.seqs.empty()) {
      const Clock::time_point t0 = Clock::now();
      run_step(out);
      int64_t rows = 0;
      for (const ScheduledSeq& q : out.seqs) rows += q.n + q.work;
      if (rows > 0) {
        const double s_per_token = seconds(t0, Clock::now()) / static_cast<double>(rows);
        if (remote_) remote_->note_step(s_per_token);
      }
    } else if (out.aborted.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // nothing fits yet: do not spin
    }
    flush_kv_events();
    if (remote_) remote_->flush();
    publish_stats();
  }
}

void ServingEngineImpl::mark_scheduled(ServeId id, Live& l) {
  (void)id;
  if (l.scheduled) return;
  l.scheduled = true;
  l.queue_s = seconds(l.submitted, Clock::now());
  std::lock_guard<std::mutex> lk(mu_);
  --n_queued_;
}

void ServingEngineImpl::plan_step(const SchedulerOutput& out, StepPlan* plan) {
  Step& step = plan->step;
  for (const ScheduledSeq& s : out.seqs) {
    SchedRequest* r = s.req;
    Live& l = static_cast<Live&>(*r);  // the engine's scheduler holds only its Lives
    mark_scheduled(r->id, l);
    // The scheme decides each row's weights, KV write and logits; the
    // runner only sees adapters and slots.
    int32_t adapter_index = -1;
    if (l.plan->sharing().adapter != nullptr) {
      auto a = std::find(step.adapters.begin(), step.adapters.end(), l.plan->sharing().adapter);
      adapter_index = static_cast<int32_t>(a - step.adapters.begin());
      if (a == step.adapters.end()) step.adapters.push_back(l.plan->sharing().adapter);
    }
    if (l.plan->reuses_segments() && l.reuse.looked_up && r->n_preemptions != l.reuse.preemptions) {
      // Preempted after its segments were copied: the recompute is a plain,
      // exact one (the copies are gone with the blocks).
      l.plan->stop_reuse();
      l.defer.release();
    }
    plan->seq_req.push_back(&l);
    plan->seq_scheme.push_back(l.background ? nullptr : l.plan->sharing().scheme);
    if (s.n == 0 && s.work > 0) {
      // Rows kept above a whole-prompt selection, in a share of their own.
      plan->seq_live.push_back(&l);
      plan_resume(s, l, adapter_index, &step, &plan->logit_rows);
    } else if (l.plan->reuses_segments() && s.begin < l.n_prompt) {
      plan->seq_live.push_back(&l);
      plan_reuse(s, l, adapter_index, &step);
      const StepSeq& added = step.seqs.back();
      for (int32_t i = added.row_begin; i < added.row_end; ++i) {
        if (step.rows[i].logits) plan->logit_rows.push_back({r->id, -1});
      }
    } else {
      plan->seq_live.push_back(s.begin < l.n_prompt ? &l : nullptr);
      plan_rows(s, l, adapter_index, &step, &plan->logit_rows);
    }
  }
  if (!step.seq_lr.empty()) step.seq_lr.resize(step.seqs.size());
}

void ServingEngineImpl::run_step(const SchedulerOutput& out) {
  StepPlan plan;
  plan_step(out, &plan);
  // The grammar masks of the rows sampled this step, on the mask worker
  // while the forward pass runs.
  std::vector<Live*> masked;
  for (const LogitRow& lr : plan.logit_rows) {
    if (lr.prompt_pos >= 0) continue;
    auto it = live_.find(lr.id);
    if (it != live_.end() && it->second->out.constrained_next()) masked.push_back(it->second.get());
  }
  if (!masked.empty()) mask_worker_.start([&masked, words = (model_->spec.n_vocab + 31) / 32] {
    for (Live* l : masked) l->out.fill_mask(words);
  });
  StepOutput so;
  so.logits.swap(logits_);
  Status st = runner_->execute(plan.step, &so);
  logits_.swap(so.logits);
  if (!masked.empty()) mask_worker_.wait();
  if (!st.is_ok()) {
    for (const ScheduledSeq& s : out.seqs) {
      ServeEvent ev;
      ev.error = st.message();
      finish(s.req->id, ServeFinish::kError, std::move(ev));
    }
    return;
  }
  after_step(out, plan, so);
}

void ServingEngineImpl::after_step(const SchedulerOutput& out, const StepPlan& plan, const StepOutput& so) {
  const std::vector<Live*>& seq_req = plan.seq_req;
  const bool deferred =
      std::any_of(seq_req.begin(), seq_req.end(), [](const Live* l) { return l->defer.capturing(); });
  if (captures_.on() || owners_.hidden() || deferred) store_captures(plan.step, so, seq_req);
  for (size_t i = 0; i < seq_req.size(); ++i) {
    if (seq_req[i]->defer.splitting()) after_split(*seq_req[i], sched_->find(seq_req[i]->id));
  }
  owners_.store(plan.step, [&](size_t q) -> const SeqSharing* {
    return q < seq_req.size() && seq_req[q] != nullptr ? &seq_req[q]->plan->sharing() : nullptr;
  });
  sched_->on_step_done(out);
  {
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.steps;
    stats_.max_step_token_layers = std::max(stats_.max_step_token_layers, so.row_layers);
    for (size_t i = 0; i < plan.seq_scheme.size() && i < so.seq_row_layers.size(); ++i) {
      if (plan.seq_scheme[i] != nullptr)
        stats_.computed_token_layers_by_scheme[plan.seq_scheme[i]] += so.seq_row_layers[i];
    }
  }
  for (size_t i = 0; i < plan.seq_live.size() && i < so.seq_row_layers.size(); ++i) {
    if (plan.seq_live[i] != nullptr) plan.seq_live[i]->prefill_token_layers += so.seq_row_layers[i];
  }
  const int64_t n_vocab = model_->spec.n_vocab;
  for (size_t j = 0; j < plan.logit_rows.size(); ++j) {
    const LogitRow& lr = plan.logit_rows[j];
    const std::span<const float> row{logits_.data() + static_cast<int64_t>(j) * n_vocab, static_cast<size_t>(n_vocab)};
    if (lr.prompt_pos >= 0) {
      on_prompt_logits(lr.id, lr.prompt_pos, row);
    } else {
      on_logits(lr.id, row);
    }
  }
}

Status ServingEngineImpl::load_adapter(const std::string& name, const std::string& path, const std::string& kind) {
  std::optional<AdapterKind> k;
  if (!kind.empty()) {
    k = adapter_kind_from_name(kind);
    if (!k) return make_error(ErrorCode::kInvalidArgument, "unknown adapter kind '", kind, "' (use lora, alora or icarus)");
  }
  AKV_ASSIGN_OR_RETURN(auto a, adapters_.load(name, path, k, model_->spec, model_->spec.n_vocab));
  (void)a;
  return Status::ok();
}

Status ServingEngineImpl::unload_adapter(const std::string& name) { return adapters_.unload(name); }

std::vector<ServedModel> ServingEngineImpl::models() const {
  std::vector<ServedModel> out;
  out.push_back(ServedModel{"", "base", "", 0, {}, {}});
  for (const AdapterInfo& a : adapters_.list()) {
    out.push_back(ServedModel{a.name, adapter_kind_name(a.kind), a.id, a.rank, a.v_a_id, a.shared_a_with});
  }
  return out;
}

Status ServingEngineImpl::end_session(const std::string& tenant, const std::string& id) {
  const std::string key = session_key(tenant, id);
  bool found = false;
  AKV_RETURN_IF_ERROR(run_on_engine([&] {
    found = kv_->sessions().end(key);
    if (lr_kv_) found = lr_kv_->sessions().end(key) || found;
    publish_stats();
  }));
  if (!found) return make_error(ErrorCode::kNotFound, "no session '", id, "'");
  return Status::ok();
}

Status ServingEngineImpl::run_on_engine(std::function<void()> fn) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> f = done->get_future();
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) return make_error(ErrorCode::kUnavailable, "the server is shutting down");
    tasks_.push_back([fn = std::move(fn), done] {
      fn();
      done->set_value();
    });
  }
  wake_.notify_one();
  f.wait();
  return Status::ok();
}

void ServingEngineImpl::run_tasks() {
  std::vector<std::function<void()>> tasks;
  {
    std::lock_guard<std::mutex> lk(mu_);
    tasks.swap(tasks_);
  }
  for (auto& t : tasks) t();
}

}  // namespace agentkv
