// The serving engine: one thread that turns the scheduler's plans into runner
// Steps and the runner's logits into tokens and client events. Submissions,
// cancellations and drains come from other threads through a small inbox.
#include "runtime/serving_engine_impl.h"

#include <cctype>

namespace agentkv {

Result<std::unique_ptr<ServingEngineImpl>> ServingEngineImpl::create(const ServingOptions& opts) {
  if (opts.n_threads < 1) return make_error(ErrorCode::kInvalidArgument, "--threads must be >= 1");
  if (opts.block_size < 1 || opts.block_size > 1024) {
    return make_error(ErrorCode::kInvalidArgument, "--block-size must be in [1, 1024]");
  }
  if (opts.max_batch_tokens < 1) return make_error(ErrorCode::kInvalidArgument, "--max-batch-tokens must be >= 1");
  if (opts.max_running < 1) return make_error(ErrorCode::kInvalidArgument, "--max-running must be >= 1");
  if (opts.max_queue < 0) return make_error(ErrorCode::kInvalidArgument, "--max-queue must be >= 0");
  if (opts.max_model_len < 0) return make_error(ErrorCode::kInvalidArgument, "--max-model-len must be >= 0");
  if (opts.kv_cache_mb < 1) return make_error(ErrorCode::kInvalidArgument, "--kv-cache-mb must be >= 1");

  const SharingScheme* scheme = sharing_scheme_get(opts.kv_sharing);
  if (scheme == nullptr) {
    return make_error(ErrorCode::kInvalidArgument, "unknown --kv-sharing '", opts.kv_sharing,
                      "' (use ", sharing_scheme_list(), ")");
  }

  std::unique_ptr<ServingEngineImpl> e(new ServingEngineImpl());
  e->opts_ = opts;
  e->default_scheme_ = scheme;
  AKV_ASSIGN_OR_RETURN(LoadedModel lm, load_model_file(opts.model_path, opts.n_threads));
  e->model_ = std::move(lm.model);
  e->tokenizer_ = std::move(lm.tokenizer);
  const ModelSpec& s = e->model_->spec;
  const int32_t trained = s.n_ctx_train > 0 ? s.n_ctx_train : 4096;
  e->max_model_len_ = opts.max_model_len > 0 ? opts.max_model_len : std::min(trained, 32768);

  if (opts.relay_capture != "off" && opts.relay_capture != "on-request" && opts.relay_capture != "all") {
    return make_error(ErrorCode::kInvalidArgument, "--relay-capture must be off, on-request or all; got '",
                      opts.relay_capture, "'");
  }
  if (!opts.relay_profile.empty()) {
    AKV_ASSIGN_OR_RETURN(std::string model_id, file_content_id(opts.model_path));
    AKV_ASSIGN_OR_RETURN(RelayProfile rp, load_relay_profile(opts.relay_profile, model_id, s.n_layers));
    KvSharingParams& d = e->opts_.kv_sharing_params;
    if (!d.l_start) d.l_start = rp.l_start;
    if (!d.l_det) d.l_det = rp.l_det;
    if (!d.l_end) d.l_end = rp.l_end;
  }
  if (!opts.droidspeak_profile.empty() && !e->opts_.kv_sharing_params.critical_layers) {
    AKV_ASSIGN_OR_RETURN(std::string model_id, file_content_id(opts.model_path));
    AKV_ASSIGN_OR_RETURN(DroidspeakProfile dp, load_droidspeak_profile(opts.droidspeak_profile, model_id, s.n_layers));
    e->opts_.kv_sharing_params.critical_layers = dp.critical_layers;
  }
  {
    const KvSharingParams& d = e->opts_.kv_sharing_params;
    if (d.l_start || d.l_det || d.l_end) {
      AKV_RETURN_IF_ERROR(sharing_scheme_get("relay")->check_params(d).with_context("relay defaults"));
      AKV_RETURN_IF_ERROR(sharing_scheme_get("relay")->check_model(d, s.n_layers).with_context("relay defaults"));
    }
    if (d.critical_layers) {
      const SharingScheme* ds = sharing_scheme_get("droidspeak");
      KvSharingParams only;
      only.critical_layers = d.critical_layers;
      AKV_RETURN_IF_ERROR(ds->check_params(only).with_context("--droidspeak-layers"));
      AKV_RETURN_IF_ERROR(ds->check_model(only, s.n_layers).with_context("--droidspeak-layers"));
    }
    // Snapshots are kept at the server's l_start; a request asking for
    // another one resumes from layer 0.
    if (opts.relay_capture != "off" && d.l_start && *d.l_start > 0) e->capture_layer_ = *d.l_start;
    // DroidSpeak's: the hidden state entering the server's first critical
    // layer, so its recompute rows start there.
    if (d.critical_layers && !d.critical_layers->empty()) {
      const int32_t first = *std::min_element(d.critical_layers->begin(), d.critical_layers->end());
      if (first > 0) e->ds_layer_ = first;
    }
  }
  const bool components = opts.relay_capture != "off";
  const bool hidden = components && e->capture_layer_ > 0;
  e->capture_all_ = opts.relay_capture == "all";
  const std::optional<KvDType> kv_dtype = kv_dtype_parse(opts.kv_dtype);
  if (!kv_dtype) {
    return make_error(ErrorCode::kInvalidArgument, "--kv-dtype '", opts.kv_dtype, "' is not one of f16, bf16, f32");
  }
  const std::optional<ActQuant> act_quant = act_quant_parse(opts.act_quant);
  if (!act_quant) return make_error(ErrorCode::kInvalidArgument, "--act-quant '", opts.act_quant, "' is not one of f32, q8");
  KvGeometry g{s.n_layers, s.n_kv_heads, s.head_dim, opts.block_size, *kv_dtype};
  // Per block: K/V, plus the relay components where they are kept.
  const int64_t component_bytes =
      (components ? int64_t{opts.block_size} * (int64_t{sizeof(float)} + int64_t{sizeof(uint32_t)}) : 0) +
      (hidden ? int64_t{opts.block_size} * (s.d_model * int64_t{sizeof(float)} + int64_t{sizeof(uint32_t)}) : 0);
  // DroidSpeak's owner tag of each slot, and its hidden-state snapshot.
  const int64_t owner_bytes =
      int64_t{opts.block_size} * (int64_t{sizeof(float)} + int64_t{sizeof(uint32_t)}) +
      (e->ds_layer_ > 0 ? int64_t{opts.block_size} * (s.d_model * int64_t{sizeof(float)} + int64_t{sizeof(uint32_t)})
                        : 0);
  if (opts.lr_cache_rank < 0 || opts.lr_cache_rank > 1024) {
    return make_error(ErrorCode::kInvalidArgument, "--lr-cache-rank must be in [0, 1024]");
  }
  const LrGeometry lg{s.n_layers, opts.block_size, opts.lr_cache_rank, *kv_dtype};
  const int64_t lr_bytes = opts.lr_cache_rank > 0 ? kLrBlocksPerKvBlock * lg.block_bytes() : 0;
  const int64_t block_bytes = g.block_bytes() + component_bytes + owner_bytes + lr_bytes;
  const int64_t n_blocks = opts.kv_cache_tokens > 0
                               ? (opts.kv_cache_tokens + opts.block_size - 1) / opts.block_size
                               : opts.kv_cache_mb * (int64_t{1} << 20) / block_bytes;
  if (n_blocks < 1) {
    return make_error(ErrorCode::kInvalidArgument, "--kv-cache-mb ", opts.kv_cache_mb, " holds no KV block (one block is ",
                      block_bytes, " bytes); raise it");
  }
  if (n_blocks > (int64_t{1} << 30)) return make_error(ErrorCode::kInvalidArgument, "--kv-cache-mb is too large");
  AKV_ASSIGN_OR_RETURN(KvStorage storage, KvStorage::create(g, n_blocks));
  e->storage_ = std::make_unique<KvStorage>(std::move(storage));
  e->kv_ = std::make_unique<KvManager>(static_cast<int32_t>(n_blocks), opts.block_size);
  {
    AKV_ASSIGN_OR_RETURN(KvComponent o, KvComponent::create(n_blocks, opts.block_size, 1));
    e->owner_ = std::make_unique<KvComponent>(std::move(o));
  }
  if (e->ds_layer_ > 0) {
    AKV_ASSIGN_OR_RETURN(KvComponent h, KvComponent::create(n_blocks, opts.block_size, s.d_model));
    e->ds_hidden_ = std::make_unique<KvComponent>(std::move(h));
  }
  if (opts.lr_cache_rank > 0) {
    const int64_t n_lr = n_blocks * kLrBlocksPerKvBlock;
    if (n_lr > (int64_t{1} << 30)) return make_error(ErrorCode::kInvalidArgument, "--kv-cache-mb is too large");
    AKV_ASSIGN_OR_RETURN(LrStorage lr, LrStorage::create(lg, n_lr));
    e->lr_storage_ = std::make_unique<LrStorage>(std::move(lr));
    e->lr_kv_ = std::make_unique<KvManager>(static_cast<int32_t>(n_lr), opts.block_size);
  }
  if (components) {
    AKV_ASSIGN_OR_RETURN(KvComponent inf, KvComponent::create(n_blocks, opts.block_size, 1));
    e->influence_ = std::make_unique<KvComponent>(std::move(inf));
  }
  if (hidden) {
    AKV_ASSIGN_OR_RETURN(KvComponent h, KvComponent::create(n_blocks, opts.block_size, s.d_model));
    e->hidden_ = std::make_unique<KvComponent>(std::move(h));
  }
  if (!(opts.segment_watermark > 0 && opts.segment_watermark <= 1)) {
    return make_error(ErrorCode::kInvalidArgument, "--segment-watermark must be in (0, 1]");
  }
  e->kv_->set_frozen_watermark(opts.segment_watermark);
  e->backend_ = backend_cpu_init(BackendConfig{opts.n_threads, *act_quant});
  e->runner_ = std::make_unique<Runner>(e->model_, e->backend_.get(), e->storage_.get());
  e->runner_->set_lr_storage(e->lr_storage_.get(), opts.flash_lora);
  SchedulerConfig sc;
  sc.max_batch_tokens = opts.max_batch_tokens;
  sc.max_running = opts.max_running;
  sc.prefix_caching = opts.prefix_caching;
  e->sched_ = std::make_unique<Scheduler>(e->kv_.get(), sc, e->lr_kv_.get());
  e->stats_.kv_bytes_per_block = block_bytes - lr_bytes;
  e->stats_.lr_bytes_per_block = opts.lr_cache_rank > 0 ? lg.block_bytes() : 0;
  for (const ServingOptions::AdapterSpec& a : opts.adapters) {
    AKV_RETURN_IF_ERROR(e->load_adapter(a.name, a.path, a.kind).with_context("--adapter " + a.name));
  }
  e->publish_stats();
  e->thread_ = std::thread([p = e.get()] { p->loop(); });
  return e;
}

ServingEngineImpl::~ServingEngineImpl() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
    cancel_all_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Result<ServeId> ServingEngineImpl::submit(ServeRequest req, ServeSink sink) {
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
  std::shared_ptr<const Adapter> adapter;
  if (!req.adapter.empty()) {
    adapter = adapters_.find(req.adapter);
    if (!adapter) return make_error(ErrorCode::kNotFound, "no adapter named '", req.adapter, "' is loaded");
  }
  const SharingScheme* scheme = default_scheme_;
  if (!req.kv_sharing.empty()) {
    scheme = sharing_scheme_get(req.kv_sharing);
    if (scheme == nullptr) {
      return make_error(ErrorCode::kInvalidArgument, "unknown kv_sharing '", req.kv_sharing,
                        "' (use ", sharing_scheme_list(), ")");
    }
  }
  AKV_RETURN_IF_ERROR(scheme->check_params(req.kv_sharing_params));
  // Unset parameters take the engine's defaults (planners read only their own).
  const KvSharingParams params = req.kv_sharing_params.with_defaults(opts_.kv_sharing_params);
  AKV_RETURN_IF_ERROR(scheme->check_model(params, model_->spec.n_layers));
  PlanContext pc{adapter.get(), req.prompt, &params, adapter ? adapters_.shared_a_peers(*adapter) : 0};
  AKV_ASSIGN_OR_RETURN(SeqSharing sharing, scheme->plan_request(pc));
  if (!sharing.lr_lineage.empty()) {
    if (!lr_kv_) {
      return make_error(ErrorCode::kInvalidArgument, "kv_sharing '", sharing.scheme,
                        "' needs the LR cache, and this server has none; start it with --lr-cache-rank > 0");
    }
    for (const LoraLayer& ly : adapter->layers) {
      if (ly.at(LoraTarget::kV).rank > opts_.lr_cache_rank) {
        return make_error(ErrorCode::kInvalidArgument, "adapter '", adapter->name, "' has v_proj rank ",
                          ly.at(LoraTarget::kV).rank, ", above the LR cache's ", opts_.lr_cache_rank,
                          "; restart the server with --lr-cache-rank ", ly.at(LoraTarget::kV).rank, " or more");
      }
    }
  }
  // Prompt logprobs need every prompt row computed: no segment reuse there.
  // An ICaRus decoder row pairs with its encoder row: no reuse either.
  std::unique_ptr<ReusePlanner> planner;
  if (req.prompt_logprobs < 0 && !sharing.decoder_row) planner = scheme->make_planner(params);
  const int32_t min_segment = params.min_segment_tokens.value_or(2 * opts_.block_size);
  const bool capture = influence_ != nullptr && (capture_all_ || std::string_view(sharing.scheme) == "relay");
  if (req.prompt_logprobs > SamplingParams::kMaxLogprobs) {
    return make_error(ErrorCode::kInvalidArgument, "prompt_logprobs must be at most ", SamplingParams::kMaxLogprobs);
  }
  if (req.prompt_logprobs >= 0 && std::string_view(sharing.scheme) == "icarus") {
    // Prompt rows run as the base encoder there: their logits are not the adapter's.
    return make_error(ErrorCode::kInvalidArgument, "prompt logprobs (echo with logprobs) are not available for an "
                                                   "ICaRus adapter under kv_sharing icarus");
  }
  ServeId id;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (draining_ || stopping_) return make_error(ErrorCode::kUnavailable, "the server is shutting down");
    if (n_queued_ >= opts_.max_queue) {
      return make_error(ErrorCode::kResourceExhausted, "the queue is full (", opts_.max_queue,
                        " waiting requests); retry later");
    }
    id = next_id_++;
    ++n_queued_;
    ++n_live_;
    inbox_.push_back(Pending{id, std::move(req), std::move(sink), Clock::now(), std::move(adapter), sharing,
                             std::move(planner), min_segment, capture});
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
  }
}

void ServingEngineImpl::take_inbox(std::vector<Pending>* fresh, std::vector<ServeId>* cancels, bool* cancel_all) {
  std::unique_lock<std::mutex> lk(mu_);
  wake_.wait(lk, [&] {
    return stopping_ || cancel_all_ || !inbox_.empty() || !cancels_.empty() || !tasks_.empty() || sched_->has_work();
  });
  fresh->swap(inbox_);
  cancels->swap(cancels_);
  *cancel_all = cancel_all_;
  cancel_all_ = false;
}

void ServingEngineImpl::loop() {
  std::vector<Pending> fresh;
  std::vector<ServeId> cancels;
  for (;;) {
    bool cancel_all = false;
    fresh.clear();
    cancels.clear();
    take_inbox(&fresh, &cancels, &cancel_all);
    run_tasks();
    for (Pending& p : fresh) {
      auto r = std::make_unique<SchedRequest>();
      r->id = p.id;
      r->tokens = p.req.prompt;
      r->n_prompt = static_cast<int32_t>(p.req.prompt.size());
      r->base_keys.tenant = p.req.tenant;
      r->base_keys.cache_salt = p.req.cache_salt;
      r->keys = r->base_keys;
      r->read_cache = p.req.prompt_logprobs < 0;
      r->one_per_step_from = p.req.one_per_step_from;
      const int32_t from = p.sharing.lineage_from;
      if (from != kNever) {
        r->keys.lineage = p.adapter->id;
        r->lineage_block = from / opts_.block_size;  // blocks ending at or before `from`
      }
      if (!p.sharing.shared_lineage.empty()) {
        // Adapter ids are hex, so a "shared:" tag never aliases one.
        r->keys.lineage = "shared:" + p.sharing.shared_lineage;
        r->lineage_block = 0;
      }
      if (!p.sharing.lr_lineage.empty()) {
        r->lr = true;
        r->lr_keys = r->base_keys;
        r->lr_keys.lineage = p.sharing.lr_lineage;
      }
      auto [it, fresh_live] = live_.try_emplace(p.id, std::move(p.sink), p.req, *tokenizer_, p.submitted);
      (void)fresh_live;
      it->second.adapter = std::move(p.adapter);
      it->second.sharing = p.sharing;
      it->second.sharing.adapter = it->second.adapter.get();
      it->second.model = p.req.adapter;
      it->second.planner = std::move(p.planner);
      it->second.min_segment = p.min_segment;
      it->second.capture = p.capture;
      sched_->add(std::move(r));
    }
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
    for (RequestId id : out.aborted) {
      ServeEvent ev;
      auto it = live_.find(id);
      if (it != live_.end() && it->second.n_generated > 0) {
        finish(id, ServeFinish::kLength);
      } else {
        ev.error = "the request does not fit in the KV cache (" + std::to_string(kv_->pool().n_blocks()) +
                   " blocks of " + std::to_string(opts_.block_size) + " tokens); raise --kv-cache-mb";
        finish(id, ServeFinish::kError, std::move(ev));
      }
    }
    if (!out.seqs.empty()) {
      run_step(out);
    } else if (out.aborted.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // nothing fits yet: do not spin
    }
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

void ServingEngineImpl::run_step(const SchedulerOutput& out) {
  Step step;
  std::vector<LogitRow> logit_rows;  // the rows with logits, in row order (the runner's output order)
  std::vector<const char*> seq_scheme;  // per Step sequence: its scheme (metrics)
  std::vector<Live*> seq_live;          // per Step sequence: its request, when the chunk is prompt
  std::vector<Live*> seq_req;           // per Step sequence: its request
  for (const ScheduledSeq& s : out.seqs) {
    SchedRequest* r = s.req;
    auto it = live_.find(r->id);
    if (it == live_.end()) continue;  // cannot happen: finished requests leave the scheduler
    Live& l = it->second;
    mark_scheduled(r->id, l);
    // The scheme decides each row's weights, KV write and logits; the
    // runner only sees adapters and slots.
    int32_t adapter_index = -1;
    if (l.sharing.adapter != nullptr) {
      auto a = std::find(step.adapters.begin(), step.adapters.end(), l.sharing.adapter);
      adapter_index = static_cast<int32_t>(a - step.adapters.begin());
      if (a == step.adapters.end()) step.adapters.push_back(l.sharing.adapter);
    }
    if (l.planner && l.reuse_looked_up && r->n_preemptions != l.reuse_preemptions) {
      // Preempted after its segments were copied: the recompute is a plain,
      // exact one (the copies are gone with the blocks).
      l.planner.reset();
      l.defer_begin = -1;
      std::vector<float>().swap(l.defer_hidden);
    }
    seq_req.push_back(&l);
    if (l.planner && s.begin < l.n_prompt) {
      seq_scheme.push_back(l.sharing.scheme);
      seq_live.push_back(&l);
      plan_reuse(s, l, adapter_index, &step);
      const StepSeq& added = step.seqs.back();
      for (int32_t i = added.row_begin; i < added.row_end; ++i) {
        if (step.rows[i].logits) logit_rows.push_back({r->id, -1});
      }
      continue;
    }
    seq_scheme.push_back(l.sharing.scheme);
    seq_live.push_back(s.begin < l.n_prompt ? &l : nullptr);
    plan_rows(s, l, adapter_index, &step, &logit_rows);
  }
  if (!step.seq_lr.empty()) step.seq_lr.resize(step.seqs.size());
  StepOutput so;
  so.logits.swap(logits_);
  Status st = runner_->execute(step, &so);
  logits_.swap(so.logits);
  if (!st.is_ok()) {
    for (const ScheduledSeq& s : out.seqs) {
      ServeEvent ev;
      ev.error = st.message();
      finish(s.req->id, ServeFinish::kError, std::move(ev));
    }
    return;
  }
  const bool deferred = std::any_of(seq_req.begin(), seq_req.end(), [](const Live* l) { return l->defer_step; });
  if (influence_ || ds_hidden_ || deferred) store_captures(step, so, seq_req);
  store_owners(step, seq_req);
  sched_->on_step_done(out);
  {
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.steps;
    for (size_t i = 0; i < seq_scheme.size() && i < so.seq_row_layers.size(); ++i) {
      stats_.computed_token_layers_by_scheme[seq_scheme[i]] += so.seq_row_layers[i];
    }
  }
  for (size_t i = 0; i < seq_live.size() && i < so.seq_row_layers.size(); ++i) {
    if (seq_live[i] != nullptr) seq_live[i]->prefill_token_layers += so.seq_row_layers[i];
  }
  const int64_t n_vocab = model_->spec.n_vocab;
  for (size_t j = 0; j < logit_rows.size(); ++j) {
    const std::span<const float> row{logits_.data() + static_cast<int64_t>(j) * n_vocab, static_cast<size_t>(n_vocab)};
    if (logit_rows[j].prompt_pos >= 0) {
      on_prompt_logits(logit_rows[j].id, logit_rows[j].prompt_pos, row);
    } else {
      on_logits(logit_rows[j].id, row);
    }
  }
}

void ServingEngineImpl::plan_reuse(const ScheduledSeq& s, Live& l, int32_t adapter_index, Step* step) {
  SchedRequest* r = s.req;
  const int32_t bs = opts_.block_size;
  const int32_t n_prompt = l.n_prompt;
  if (!l.reuse_looked_up) {
    // Once, at the first chunk: s.begin is where the exact prefix hit ends
    // (prefix hits take precedence), so segments are looked for after it.
    l.reuse_looked_up = true;
    l.reuse_preemptions = r->n_preemptions;
    l.reused.assign(n_prompt, 0);
    l.run_start.assign(n_prompt, -1);
    l.hits = kv_->find_segments(std::span<const int32_t>(r->tokens.data(), n_prompt), s.begin, r->keys, l.min_segment);
    for (const SegmentHit& h : l.hits) std::fill_n(l.reused.begin() + h.dst_pos, h.n, uint8_t{1});
    // K/V from the first reused token on is approximate: never indexed.
    if (!l.hits.empty()) {
      r->commit_limit = std::min(r->commit_limit, l.hits.front().dst_pos);
      r->approx_index_from = l.hits.back().dst_pos + l.hits.back().n;
    }
  }
  const int32_t b = s.begin, e = std::min(s.begin + s.n, n_prompt);
  StepSeq q;
  q.row_begin = static_cast<int32_t>(step->rows.size());
  q.blocks = kv_->block_table(r->id);
  // Copies for the chunk's reused positions. A source block evicted (or
  // re-allocated, this very step included) since the lookup is not copied:
  // its whole hit is recomputed.
  for (const SegmentHit& h : l.hits) {
    const int32_t lo = std::max(b, h.dst_pos), hi = std::min(e, h.dst_pos + h.n);
    if (lo >= hi || !l.reused[lo]) continue;
    if (!kv_->segment_hit_valid(h)) {
      std::fill_n(l.reused.begin() + h.dst_pos, h.n, uint8_t{0});
      continue;
    }
    for (int32_t p = lo; p < hi; ++p) {
      const int64_t src = int64_t{h.src.id} * bs + h.src_offset + (p - h.dst_pos);
      const int64_t dst = int64_t{q.blocks[p / bs]} * bs + p % bs;
      step->copies.push_back(KvCopy{src, dst, h.dst_pos - h.src_pos});
      // The captured state travels with the K/V.
      if (hidden_) hidden_->copy(src, h.src.generation, dst, generation_of(dst));
      if (influence_) influence_->copy(src, h.src.generation, dst, generation_of(dst));
    }
    l.reused_tokens += hi - lo;
    kv_->segment_hit_used(h);
  }
  for (int32_t p = b; p < e; ++p) {
    l.run_start[p] = !l.reused[p] ? -1 : (p > 0 && l.reused[p - 1] ? l.run_start[p - 1] : p);
  }
  auto slot_of = [&](int32_t p) { return int64_t{q.blocks[p / bs]} * bs + p % bs; };
  // A row of prompt position p with its token, slot and weights; the plan sets its layers.
  auto prompt_row = [&](int32_t p) {
    TokenRow row;
    row.token = r->tokens[p];
    row.pos = p;
    row.slot = slot_of(p);
    row.adapter = p >= l.sharing.weights_from ? adapter_index : -1;
    return row;
  };
  if (influence_) {
    l.has_hidden.resize(n_prompt, 0);
    l.influence.resize(n_prompt, 0.0f);
    for (int32_t p = b; p < e; ++p) {
      if (!l.reused[p]) continue;
      const int64_t slot = slot_of(p);
      l.has_hidden[p] = hidden_ && !hidden_->read(slot, generation_of(slot)).empty();
      const std::span<const float> inf = influence_->read(slot, generation_of(slot));
      l.influence[p] = inf.empty() ? 0.0f : inf[0];
    }
  }
  const int32_t n_layers = model_->spec.n_layers;
  const int64_t d_model = model_->spec.d_model;
  // One selection over the whole prompt (ReusePlanner::whole_prompt_layer),
  // unless the rows' one capture is taken by relay's or a profiler watches.
  const int32_t sel = l.capture || l.kv_probe || l.hits.empty() ? -1 : l.planner->whole_prompt_layer(n_layers);
  if (sel >= 0 && e < n_prompt) {
    // Not the prompt's last chunk: every position runs up to the selection
    // layer and waits there (its hidden state entering it) for the last
    // chunk, which plans the whole prompt at once; that layer's cached
    // entries stay for the hook to read. At layer 0 there is nothing to
    // wait with: the chunk runs layer 0, and again with the last chunk.
    if (l.defer_begin < 0) l.defer_begin = b;
    if (sel > 0) {
      l.defer_hidden.resize(static_cast<size_t>(n_prompt * d_model));
      l.defer_step = true;
    }
    for (int32_t p = b; p < e; ++p) {
      TokenRow row = prompt_row(p);
      row.layer_end = std::max(sel, 1);
      if (sel > 0) row.capture_layer = sel;
      step->rows.push_back(row);
    }
    q.row_end = static_cast<int32_t>(step->rows.size());
    step->seqs.push_back(std::move(q));
    return;
  }
  const int32_t cb = sel >= 0 && l.defer_begin >= 0 ? l.defer_begin : b;  // the planned range's begin
  ReuseChunk c;
  c.begin = cb;
  c.n = e - cb;
  c.n_layers = n_layers;
  c.n_prompt = n_prompt;
  c.block_tokens = bs;
  c.reused = std::span<const uint8_t>(l.reused.data() + cb, c.n);
  c.run_start = std::span<const int32_t>(l.run_start.data() + cb, c.n);
  c.reused_after = e < n_prompt && l.reused[e];
  if (influence_) {
    c.hidden_layer = hidden_ ? capture_layer_ : -1;
    c.has_hidden = std::span<const uint8_t>(l.has_hidden.data() + cb, c.n);
    c.influence = std::span<const float>(l.influence.data() + cb, c.n);
  }
  std::vector<ReuseRow> want;
  std::vector<ReuseHook> hooks;
  l.planner->plan_chunk(c, &want, &hooks);
  // Rows in position order: every position not reused runs every layer; a
  // reused one runs where the planner wants it.
  std::vector<int32_t> row_of(c.n, -1);
  size_t w = 0;
  std::sort(want.begin(), want.end(), [](const ReuseRow& x, const ReuseRow& y) { return x.pos < y.pos; });
  for (int32_t p = cb; p < e; ++p) {
    while (w < want.size() && want[w].pos < p) ++w;
    const bool planned = w < want.size() && want[w].pos == p;
    if (l.reused[p] && !planned) continue;
    TokenRow row = prompt_row(p);
    row.logits = s.sample && p == e - 1;
    if (p < b) {
      // An earlier chunk ran it up to the selection layer: it resumes there
      // (from layer 0 when that is the selection layer).
      row.layer_end = planned ? want[w].layer_end : kAllLayers;
      if (sel > 0) {
        row.layer_begin = sel;
        row.hidden_in = static_cast<int32_t>(step->hidden_in.size() / d_model);
        const auto h = l.defer_hidden.begin() + int64_t{p} * d_model;
        step->hidden_in.insert(step->hidden_in.end(), h, h + d_model);
      }
    } else if (l.reused[p]) {
      row.layer_end = want[w].layer_end;
      // A reused row may resume above layer 0 from its snapshot, nowhere else.
      const int32_t from = want[w].layer_begin;
      if (from > 0 && from == capture_layer_ && hidden_ && l.has_hidden[p]) {
        const std::span<const float> h = hidden_->read(row.slot, generation_of(row.slot));
        row.layer_begin = from;
        row.hidden_in = static_cast<int32_t>(step->hidden_in.size() / model_->spec.d_model);
        step->hidden_in.insert(step->hidden_in.end(), h.begin(), h.end());
      }
    } else {
      mark_captures(l, &row);
    }
    row_of[p - cb] = static_cast<int32_t>(step->rows.size());
    step->rows.push_back(row);
  }
  q.row_end = static_cast<int32_t>(step->rows.size());
  if (cb < b) {
    l.defer_begin = -1;
    std::vector<float>().swap(l.defer_hidden);
  }
  const int32_t seq_index = static_cast<int32_t>(step->seqs.size());
  step->seqs.push_back(std::move(q));
  for (ReuseHook& h : hooks) {
    LayerHook lh;
    lh.seq = seq_index;
    lh.layer = h.layer;
    for (int32_t p : h.colsum_pos) {
      if (p >= cb && p < e && row_of[p - cb] >= 0) lh.colsum_rows.push_back(row_of[p - cb]);
    }
    std::sort(lh.colsum_rows.begin(), lh.colsum_rows.end());
    // The step outlives the call; its rows give each hooked row's position.
    lh.fn = [rows = &step->rows, fn = std::move(h.fn), head_dim = int64_t{model_->spec.head_dim}](
                const HookView& v, std::span<uint8_t> keep) {
      std::vector<int32_t> pos(v.rows.size());
      for (size_t i = 0; i < pos.size(); ++i) pos[i] = (*rows)[v.rows[i]].pos;
      ReuseHookView rv;
      rv.pos = pos;
      rv.v = v.v;
      rv.cached_v = v.cached_v;
      rv.k = v.k;
      rv.cached_k = v.cached_k;
      rv.kv_dim = v.kv_dim;
      rv.head_dim = head_dim;
      rv.colsum = v.colsum;
      fn(rv, keep);
    };
    step->hooks.push_back(std::move(lh));
  }
  if (l.kv_probe) {
    // Profilers: every layer's fresh and copied V of the reused rows.
    for (int32_t layer = 0; layer < model_->spec.n_layers; ++layer) {
      LayerHook lh;
      lh.seq = seq_index;
      lh.layer = layer;
      lh.fn = [rows = &step->rows, reused = &l.reused, probe = &l.kv_probe, layer,
               head_dim = int64_t{model_->spec.head_dim}](const HookView& v, std::span<uint8_t> keep) {
        (void)keep;
        std::vector<int32_t> pos;
        std::vector<float> k, ck, fresh, cached;
        auto take = [&](std::vector<float>& to, const float* from, size_t i) {
          to.insert(to.end(), from + i * v.kv_dim, from + (i + 1) * v.kv_dim);
        };
        for (size_t i = 0; i < v.rows.size(); ++i) {
          const int32_t p = (*rows)[v.rows[i]].pos;
          if (p >= static_cast<int32_t>(reused->size()) || !(*reused)[p]) continue;
          pos.push_back(p);
          take(k, v.k, i);
          take(ck, v.cached_k, i);
          take(fresh, v.v, i);
          take(cached, v.cached_v, i);
        }
        ServeRequest::KvProbe pr;
        pr.layer = layer;
        pr.pos = pos.data();
        pr.n = static_cast<int64_t>(pos.size());
        pr.k = k.data();
        pr.cached_k = ck.data();
        pr.v = fresh.data();
        pr.cached_v = cached.data();
        pr.kv_dim = v.kv_dim;
        pr.head_dim = head_dim;
        if (pr.n > 0) (*probe)(pr);
      };
      step->hooks.push_back(std::move(lh));
    }
  }
}

void ServingEngineImpl::mark_captures(const Live& l, TokenRow* row) const {
  if (!l.capture || row->slot < 0) return;
  const int32_t end = row->layer_end == kAllLayers ? model_->spec.n_layers : row->layer_end;
  if (capture_layer_ > 0 && row->layer_begin == 0 && end > capture_layer_) row->capture_layer = capture_layer_;
  // Generated tokens receive influence from later decode steps.
  if (row->pos >= l.n_prompt) row->influence = true;
}

void ServingEngineImpl::store_captures(const Step& step, const StepOutput& so, const std::vector<Live*>& seq_of) {
  const int64_t d = model_->spec.d_model;
  int64_t ci = 0;
  for (size_t q = 0; q < step.seqs.size(); ++q) {
    // A DroidSpeak request's captures are its snapshots; others' relay's.
    const bool ds = q < seq_of.size() && seq_of[q] != nullptr && !seq_of[q]->sharing.critical_layers.empty();
    KvComponent* to = ds ? ds_hidden_.get() : hidden_.get();
    // A chunk run only through its whole-prompt selection layer: its
    // captures wait in the request for the prompt's last chunk.
    Live* defer = q < seq_of.size() && seq_of[q] != nullptr && seq_of[q]->defer_step ? seq_of[q] : nullptr;
    if (defer != nullptr) defer->defer_step = false;
    for (int32_t r = step.seqs[q].row_begin; r < step.seqs[q].row_end; ++r) {
      const TokenRow& row = step.rows[r];
      if (row.capture_layer < 0) continue;
      const float* h = so.captures.data() + ci++ * d;
      if (defer != nullptr) {
        std::copy(h, h + d, defer->defer_hidden.begin() + int64_t{row.pos} * d);
        continue;
      }
      if (to == nullptr) continue;
      std::span<float> dst = to->write(row.slot, generation_of(row.slot));
      std::copy(h, h + d, dst.begin());
    }
  }
  if (!influence_) return;
  const int32_t bs = opts_.block_size;
  for (size_t q = 0; q < so.influence.size() && q < seq_of.size(); ++q) {
    const std::vector<float>& acc = so.influence[q];
    if (acc.empty() || seq_of[q] == nullptr) continue;
    const StepSeq& sq = step.seqs[q];
    int32_t last = -1;  // the latest query position: keys before it were generated earlier
    for (int32_t r = sq.row_begin; r < sq.row_end; ++r) {
      if (step.rows[r].influence) last = std::max(last, step.rows[r].pos);
    }
    for (int32_t j = seq_of[q]->n_prompt; j < last && j < static_cast<int32_t>(acc.size()); ++j) {
      const int64_t slot = int64_t{sq.blocks[j / bs]} * bs + j % bs;
      const uint32_t gen = generation_of(slot);
      const std::span<const float> cur = influence_->read(slot, gen);
      const float base = cur.empty() ? 0.0f : cur[0];
      influence_->write(slot, gen)[0] = base + acc[j];
    }
  }
}

void ServingEngineImpl::on_prompt_logits(ServeId id, int32_t pos, std::span<const float> logits) {
  auto it = live_.find(id);
  SchedRequest* r = sched_->find(id);
  if (it == live_.end() || r == nullptr) return;
  Live& l = it->second;
  // A recompute after preemption scores the same positions again: keep the first.
  if (pos < 0 || static_cast<size_t>(pos) >= l.prompt_lps.size() || l.prompt_lps[pos].id >= 0) return;
  l.prompt_lps[pos] = logprobs_of(logits, r->tokens[pos + 1], l.prompt_logprobs);
}

void ServingEngineImpl::on_logits(ServeId id, std::span<const float> logits) {
  auto it = live_.find(id);
  SchedRequest* r = sched_->find(id);
  if (it == live_.end() || r == nullptr) return;
  Live& l = it->second;
  ServeEvent ev;
  if (!l.first_sent) {
    l.first_sent = true;
    l.ttft_s = seconds(l.submitted, Clock::now());
    ev.prompt_tokens = l.n_prompt;
    ev.cached_tokens = std::max(0, r->n_cached_prompt);
    ev.reused_tokens = l.reused_tokens;
    ev.prefill_token_layers = l.prefill_token_layers;
    ev.reuse_rate = reuse_rate(l, ev.cached_tokens);
    ev.kv_sharing = l.sharing.scheme;
    ev.queue_s = l.queue_s;
    ev.ttft_s = l.ttft_s;
    ev.prompt_logprobs = std::move(l.prompt_lps);
    std::lock_guard<std::mutex> lk(mu_);
    stats_.prompt_tokens += l.n_prompt;
    AdapterStats& m = stats_.per_model[l.model];
    ++m.requests;
    m.prompt_tokens += l.n_prompt;
    m.cached_tokens += ev.cached_tokens;
    stats_.prompt_tokens_by_scheme[l.sharing.scheme] += l.n_prompt;
    stats_.cached_tokens_by_scheme[l.sharing.scheme] += ev.cached_tokens;
    stats_.reused_tokens_by_scheme[l.sharing.scheme] += ev.reused_tokens;
    if (ev.reused_tokens > 0) stats_.reused_token_layers_by_scheme[l.sharing.scheme] += reused_entries(l, ev.cached_tokens);
  }
  if (l.return_logits) ev.logits.assign(logits.begin(), logits.end());
  const bool forced = static_cast<size_t>(l.n_generated) < l.forced.size();
  SampleResult sr = forced ? logprobs_of(logits, l.forced[l.n_generated], l.sampler.params().n_logprobs)
                           : l.sampler.sample(logits);
  const bool stop_id = std::find(l.stop_token_ids.begin(), l.stop_token_ids.end(), sr.id) != l.stop_token_ids.end();
  if (stop_id || (!l.ignore_eos && tokenizer_->is_eog(sr.id))) {
    finish(id, ServeFinish::kStop, std::move(ev));
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

void ServingEngineImpl::finish(ServeId id, ServeFinish why, ServeEvent ev) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  Live& l = it->second;
  if (!segment_jobs_.empty()) finish_segment_job(id, why, ev.error);
  if (why != ServeFinish::kError && why != ServeFinish::kCancelled && !l.stops.stopped()) {
    ev.text += l.stops.push(l.detok.flush()) + l.stops.flush();
  }
  ev.finish = why;
  ev.prompt_tokens = l.n_prompt;
  if (SchedRequest* r = sched_->find(id)) ev.cached_tokens = std::max(0, r->n_cached_prompt);
  ev.reused_tokens = l.reused_tokens;
  ev.prefill_token_layers = l.prefill_token_layers;
  ev.reuse_rate = reuse_rate(l, ev.cached_tokens);
  ev.completion_tokens = l.n_generated;
  ev.kv_sharing = l.sharing.scheme;
  ev.lr_fallback = l.sharing.lr_fallback;
  ev.queue_s = l.queue_s;
  ev.ttft_s = l.ttft_s;
  const bool was_queued = !l.scheduled;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.per_model[l.model].completion_tokens += l.n_generated;
    if (l.sharing.lr_fallback) ++stats_.lr_fallback_requests;
  }
  l.sink(std::move(ev));
  sched_->finish(id);
  live_.erase(it);
  publish_stats();  // before drain() can see the request gone
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (was_queued) --n_queued_;
    --n_live_;
  }
  idle_.notify_all();
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

namespace {

bool valid_segment_id(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  }
  return true;
}

SegmentInfo segment_info(const FrozenSegment& s) {
  SegmentInfo i;
  i.id = s.id;
  i.tenant = s.keys.tenant;
  i.cache_salt = s.keys.cache_salt;
  i.tokens = static_cast<int32_t>(s.tokens.size());
  i.blocks = s.n_blocks;
  i.hits = s.hits;
  i.created = static_cast<double>(s.created_ms) / 1000.0;
  i.last_used = static_cast<double>(s.last_used_ms) / 1000.0;
  i.evicted = s.evicted;
  return i;
}

}  // namespace

Result<SegmentInfo> ServingEngineImpl::create_segment(const SegmentSpec& spec) {
  const int64_t n = static_cast<int64_t>(spec.tokens.size());
  if (n == 0) return make_error(ErrorCode::kInvalidArgument, "the segment is empty");
  if (!opts_.prefix_caching) {
    return make_error(ErrorCode::kInvalidArgument, "frozen segments need prefix caching, which this server runs without");
  }
  if (n < opts_.block_size) {
    return make_error(ErrorCode::kInvalidArgument, "the segment has ", n, " tokens; a frozen segment needs at least one KV block (",
                      opts_.block_size, " tokens)");
  }
  if (!spec.id.empty() && !valid_segment_id(spec.id)) {
    return make_error(ErrorCode::kInvalidArgument, "segment id '", spec.id.substr(0, 64),
                      "' is not 1-64 characters of A-Z, a-z, 0-9, '.', '_' and '-'");
  }
  // The rest (vocabulary, context, pool size) is what submit() checks of a prompt.
  ServeRequest req;
  req.prompt = spec.tokens;
  req.max_tokens = 1;
  req.ignore_eos = true;
  req.tenant = spec.tenant;
  req.cache_salt = spec.cache_salt;
  req.kv_sharing = "none";  // exact K/V: the pinned blocks are what a full prefill writes
  auto done = std::make_shared<std::promise<Result<SegmentInfo>>>();
  std::future<Result<SegmentInfo>> result = done->get_future();
  AKV_RETURN_IF_ERROR(run_on_engine([&, done] {
    std::string seg_id = spec.id;
    if (!seg_id.empty()) {
      bool taken = kv_->frozen().find(seg_id) != nullptr;
      for (const auto& [rid, job] : segment_jobs_) taken |= job.seg_id == seg_id;
      if (taken) {
        done->set_value(make_error(ErrorCode::kInvalidArgument, "segment id '", seg_id, "' is taken"));
        return;
      }
      // A restored "seg-<n>": the engine's own names continue after it.
      if (seg_id.rfind("seg-", 0) == 0 && seg_id.size() > 4 && seg_id.size() <= 20 &&
          seg_id.find_first_not_of("0123456789", 4) == std::string::npos) {
        const uint64_t n = std::stoull(seg_id.substr(4));
        next_segment_ = std::max(next_segment_, n + 1);
      }
    } else {
      do {
        seg_id = "seg-" + std::to_string(next_segment_++);
      } while (kv_->frozen().find(seg_id) != nullptr);
    }
    Result<ServeId> id = submit(std::move(req), [](ServeEvent&&) {});
    if (!id.is_ok()) {
      done->set_value(id.status());
      return;
    }
    segment_jobs_[*id] = SegmentJob{seg_id, spec, done};
  }));
  return result.get();
}

void ServingEngineImpl::finish_segment_job(ServeId id, ServeFinish why, const std::string& error) {
  auto it = segment_jobs_.find(id);
  if (it == segment_jobs_.end()) return;
  SegmentJob job = std::move(it->second);
  segment_jobs_.erase(it);
  if (why == ServeFinish::kCancelled) {
    job.done->set_value(make_error(ErrorCode::kUnavailable, "the segment's prefill was cancelled (shutting down)"));
    return;
  }
  if (why == ServeFinish::kError) {
    job.done->set_value(make_error(ErrorCode::kInternal, "the segment's prefill failed: ", error));
    return;
  }
  ExtraKeys keys;
  keys.tenant = job.spec.tenant;
  keys.cache_salt = job.spec.cache_salt;
  Result<int32_t> n = kv_->freeze_segment(job.seg_id, job.spec.tokens, keys);
  if (!n.is_ok()) {
    job.done->set_value(make_error(ErrorCode::kInternal, "the segment's KV could not be pinned: ", n.status().message()));
    return;
  }
  publish_stats();  // stats() right after create_segment returns shows the segment
  job.done->set_value(segment_info(*kv_->frozen().find(job.seg_id)));
}

Status ServingEngineImpl::delete_segment(const std::string& id, const std::string& tenant) {
  Status st = Status::ok();
  AKV_RETURN_IF_ERROR(run_on_engine([&] {
    const FrozenSegment* s = kv_->frozen().find(id);
    // Another tenant's segment is as absent as an unknown one.
    st = s == nullptr || s->keys.tenant != tenant ? make_error(ErrorCode::kNotFound, "no segment '", id, "'")
                                                  : kv_->unfreeze_segment(id);
    publish_stats();
  }));
  return st;
}

std::vector<SegmentSpec> ServingEngineImpl::frozen_segment_specs() {
  std::vector<SegmentSpec> out;
  Status st = run_on_engine([&] {
    for (const FrozenSegment* s : kv_->frozen().list()) {
      if (!s->evicted) out.push_back(SegmentSpec{s->tokens, s->keys.tenant, s->keys.cache_salt, s->id});
    }
  });
  (void)st;  // stopped: nothing to save
  return out;
}

std::vector<SegmentInfo> ServingEngineImpl::list_segments(const std::string& tenant) {
  std::vector<SegmentInfo> out;
  Status st = run_on_engine([&] {
    for (const FrozenSegment* s : kv_->frozen().list()) {
      if (s->keys.tenant == tenant) out.push_back(segment_info(*s));
    }
  });
  (void)st;  // stopping: nothing to list
  return out;
}


Result<std::unique_ptr<ServingEngine>> create_serving_engine(const ServingOptions& opts) {
  AKV_ASSIGN_OR_RETURN(auto e, ServingEngineImpl::create(opts));
  return std::unique_ptr<ServingEngine>(std::move(e));
}

const char* serve_finish_name(ServeFinish f) {
  switch (f) {
    case ServeFinish::kStop: return "stop";
    case ServeFinish::kLength: return "length";
    case ServeFinish::kCancelled: return "cancelled";
    case ServeFinish::kError: return "error";
    case ServeFinish::kNone: break;
  }
  return "";
}

}  // namespace agentkv
