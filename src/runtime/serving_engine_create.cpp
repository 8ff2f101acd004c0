// The serving engine's construction (serving_engine.cpp runs it): options
// checked, the model loaded, the KV pool and its components sized from one
// memory budget, the runner, scheduler and observers set up, and the engine
// thread started; and its shutdown.
#include "kv/remote_block.h"
#include "runtime/decode_layout.h"
#include "runtime/serving_engine_impl.h"
#include "util/log.h"

namespace agentkv {

Status ServingEngineImpl::check_options(const ServingOptions& opts) {
  if (opts.n_threads < 1) return make_error(ErrorCode::kInvalidArgument, "--threads must be >= 1");
  if (opts.block_size < 1 || opts.block_size > 1024) {
    return make_error(ErrorCode::kInvalidArgument, "--block-size must be in [1, 1024]");
  }
  if (opts.max_batch_tokens < 1)
    return make_error(ErrorCode::kInvalidArgument, "--max-batch-tokens must be >= 1");
  if (opts.max_running < 1) return make_error(ErrorCode::kInvalidArgument, "--max-running must be >= 1");
  if (opts.background_reserve < 0)
    return make_error(ErrorCode::kInvalidArgument, "--background-reserve must be >= 0");
  if (opts.max_queue < 0) return make_error(ErrorCode::kInvalidArgument, "--max-queue must be >= 0");
  if (opts.max_model_len < 0) return make_error(ErrorCode::kInvalidArgument, "--max-model-len must be >= 0");
  if (opts.kv_cache_mb < 1) return make_error(ErrorCode::kInvalidArgument, "--kv-cache-mb must be >= 1");
  return Status::ok();
}

Result<std::string> ServingEngineImpl::model_content_id() {
  if (model_id_.empty()) {
    AKV_ASSIGN_OR_RETURN(model_id_, file_content_id(opts_.model_path));
  }
  return model_id_;
}

Status ServingEngineImpl::configure_schemes() {
  const ModelSpec& s = model_->spec;
  const ServerSchemeContext c{&opts_, s.n_layers, s.d_model};
  for (const char* name : sharing_scheme_names()) {
    AKV_RETURN_IF_ERROR(
        sharing_scheme_get(name)->configure_server(c, &opts_.kv_sharing_params, &components_));
  }
  if (!opts_.scheme_defaults.empty()) {
    AKV_ASSIGN_OR_RETURN(std::string model_id, model_content_id());
    AKV_ASSIGN_OR_RETURN(scheme_defaults_, load_scheme_defaults(opts_.scheme_defaults, model_id));
    for (const auto& [name, p] : scheme_defaults_) {
      // The file's own values are checked against the model (what the
      // server's defaults alone already fail, such as relay without a
      // profile, is not the file's fault), and where a server flag shadows
      // one of them, that is said.
      const SharingScheme* scheme = sharing_scheme_get(name);
      if (scheme->check_model(opts_.kv_sharing_params, s.n_layers).is_ok()) {
        AKV_RETURN_IF_ERROR(scheme->check_model(p.with_defaults(opts_.kv_sharing_params), s.n_layers)
                                .with_context("scheme defaults '" + opts_.scheme_defaults + "', " + name));
      }
      for (const KvSharingField& f : kKvSharingFields) {
        if (kv_sharing_field_set(p, f) && kv_sharing_field_set(opts_.kv_sharing_params, f)) {
          AKV_LOG_WARN("scheme defaults '", opts_.scheme_defaults, "': ", name, ".", f.name,
                       " is overridden by the server's flag");
        }
      }
    }
  }
  return Status::ok();
}

Status ServingEngineImpl::allocate_kv(KvDType kv_dtype) {
  const ModelSpec& s = model_->spec;
  KvGeometry g{s.n_layers, s.n_kv_heads, s.head_dim, opts_.block_size, kv_dtype};
  // Per block: K/V, plus what the schemes' KV components keep beside it.
  // A pooled component (the LR cache) adds its blocks' share.
  const int64_t component_bytes = components_.bytes_per_block(opts_.block_size);
  const std::optional<PoolDecl>& pool = components_.pool();
  const LrGeometry lg{s.n_layers, opts_.block_size, pool ? pool->width : 0, kv_dtype};
  const int64_t lr_bytes = pool ? pool->blocks_per_kv_block * lg.block_bytes() : 0;
  const int64_t block_bytes = g.block_bytes() + component_bytes + lr_bytes;
  const int64_t n_blocks = opts_.kv_cache_tokens > 0
                               ? (opts_.kv_cache_tokens + opts_.block_size - 1) / opts_.block_size
                               : opts_.kv_cache_mb * (int64_t{1} << 20) / block_bytes;
  if (n_blocks < 1) {
    return make_error(ErrorCode::kInvalidArgument, "--kv-cache-mb ", opts_.kv_cache_mb,
                      " holds no KV block (one block is ", block_bytes, " bytes); raise it");
  }
  if (n_blocks > (int64_t{1} << 30))
    return make_error(ErrorCode::kInvalidArgument, "--kv-cache-mb is too large");
  AKV_ASSIGN_OR_RETURN(KvStorage storage, KvStorage::create(g, n_blocks));
  storage_ = std::make_unique<KvStorage>(std::move(storage));
  kv_ = std::make_unique<KvManager>(static_cast<int32_t>(n_blocks), opts_.block_size);
  AKV_RETURN_IF_ERROR(components_.create_all(n_blocks, opts_.block_size));
  {
    const std::optional<ComponentDecl>& h = components_.decl(ComponentRole::kOwnerHidden);
    owners_ = OwnerTags(components_.get(ComponentRole::kOwnerTags), components_.get(ComponentRole::kOwnerHidden),
                        h ? h->layer : -1, kv_.get(), opts_.block_size, s.n_layers, s.d_model);
  }
  {
    const std::optional<ComponentDecl>& h = components_.decl(ComponentRole::kCaptureHidden);
    const std::optional<ComponentDecl>& i = components_.decl(ComponentRole::kCaptureInfluence);
    captures_ = Captures(components_.get(ComponentRole::kCaptureHidden),
                         components_.get(ComponentRole::kCaptureInfluence), h ? h->layer : -1,
                         i && i->every_request, kv_.get(), opts_.block_size, s.n_layers);
  }
  reuse_ = SegmentReuse(kv_.get(), &captures_, opts_.block_size, s.n_layers);
  if (pool) {
    const int64_t n_lr = n_blocks * pool->blocks_per_kv_block;
    if (n_lr > (int64_t{1} << 30))
      return make_error(ErrorCode::kInvalidArgument, "--kv-cache-mb is too large");
    AKV_ASSIGN_OR_RETURN(LrStorage lr, LrStorage::create(lg, n_lr));
    lr_storage_ = std::make_unique<LrStorage>(std::move(lr));
    lr_kv_ = std::make_unique<KvManager>(static_cast<int32_t>(n_lr), opts_.block_size);
  }
  if (!(opts_.segment_watermark > 0 && opts_.segment_watermark <= 1)) {
    return make_error(ErrorCode::kInvalidArgument, "--segment-watermark must be in (0, 1]");
  }
  kv_->set_frozen_watermark(opts_.segment_watermark);
  kv_->sessions().set_share(opts_.session_share);
  if (lr_kv_) lr_kv_->sessions().set_share(opts_.session_share);
  defer_ = std::make_unique<KvScratch>(kv_.get(), storage_.get(), s.d_model);
  stats_.kv_bytes_per_block = block_bytes - lr_bytes;
  stats_.lr_bytes_per_block = pool ? lg.block_bytes() : 0;
  return Status::ok();
}

Result<std::unique_ptr<ServingEngineImpl>> ServingEngineImpl::create(const ServingOptions& opts) {
  AKV_RETURN_IF_ERROR(check_options(opts));

  const Result<const SharingScheme*> found = sharing_scheme_find(opts.kv_sharing);
  if (!found.is_ok()) return found.status().with_context("--kv-sharing");
  const SharingScheme* scheme = *found;

  std::unique_ptr<ServingEngineImpl> e(new ServingEngineImpl());
  e->opts_ = opts;
  e->default_scheme_ = scheme;
  AKV_ASSIGN_OR_RETURN(LoadedModel lm, load_model_file(opts.model_path, opts.n_threads));
  e->model_ = std::move(lm.model);
  e->tokenizer_ = std::move(lm.tokenizer);
  const ModelSpec& s = e->model_->spec;
  const int32_t trained = s.n_ctx_train > 0 ? s.n_ctx_train : 4096;
  e->max_model_len_ = opts.max_model_len > 0 ? opts.max_model_len : std::min(trained, 32768);

  AKV_RETURN_IF_ERROR(e->configure_schemes());
  const std::optional<KvDType> kv_dtype = kv_dtype_parse(opts.kv_dtype);
  if (!kv_dtype) {
    return make_error(ErrorCode::kInvalidArgument, "--kv-dtype '", opts.kv_dtype,
                      "' is not one of f16, bf16, f32");
  }
  const std::optional<ActQuant> act_quant = act_quant_parse(opts.act_quant);
  if (!act_quant) {
    return make_error(ErrorCode::kInvalidArgument, "--act-quant '", opts.act_quant,
                      "' is not one of f32, q8");
  }
  AKV_RETURN_IF_ERROR(e->allocate_kv(*kv_dtype));
  e->backend_ = backend_cpu_init(BackendConfig{opts.n_threads, *act_quant, opts.prepack_weights});
  // q4_K, q6_K, q5_0 and q8_0 matrices in the decode layout, in place of the file's
  // blocks (the scalar kernels, the reference, read the blocks: left as
  // they are there).
  if (*act_quant == ActQuant::kQ8 && opts.decode_layout && std::string_view(backend_cpu_isa()) != "scalar") {
    if (const int64_t b = lay_out_for_decode(*e->model_, opts.n_threads); b > 0)
      AKV_LOG_INFO("decode layout: ", b >> 20, " MiB of q4_K/q6_K/q5_0/q8_0 matrices in records of eight rows");
  }
  e->runner_ = std::make_unique<Runner>(e->model_, e->backend_.get(), e->storage_.get());
  e->stats_.prepacked_weight_bytes = e->runner_->prepared_weight_bytes();
  if (opts.prepack_weights) {
    if (e->runner_->prepared_weight_bytes() == 0) {
      AKV_LOG_WARN(
          "--prepack-weights: nothing laid out (it needs --act-quant q8, weights of a q8 type and a ",
          "SIMD q8 kernel)");
    } else {
      AKV_LOG_INFO("--prepack-weights: ", e->runner_->prepared_weight_bytes() >> 20,
                   " MiB of weights laid out for the q8 kernels");
    }
  }
  e->runner_->set_lr_storage(e->lr_storage_.get(), opts.flash_lora);
  SchedulerConfig sc;
  sc.max_batch_tokens = opts.max_batch_tokens;
  sc.max_running = opts.max_running;
  sc.prefix_caching = opts.prefix_caching;
  sc.background_rows = opts.background_rows;
  sc.background_reserve = opts.background_reserve;
  if (!opts.session_priority) sc.priority_streak = 0;
  e->sched_ = std::make_unique<Scheduler>(e->kv_.get(), sc, e->lr_kv_.get());
  for (const ServingOptions::AdapterSpec& a : opts.adapters) {
    AKV_RETURN_IF_ERROR(e->load_adapter(a.name, a.path, a.kind).with_context("--adapter " + a.name));
  }
  if (opts.kv_events) {
    e->kv_events_ = std::make_unique<KvEventSource>(
        opts.block_size, "CPU",
        [p = e.get()](const std::string& lineage) { return p->lineage_readers(lineage); });
    e->observers_.add(e->kv_events_.get());
    e->kv_events_->clear_all();
    e->flush_kv_events();
  }
  if (opts.kv_remote) {
    AKV_ASSIGN_OR_RETURN(std::string model_id, e->model_content_id());
    const KvGeometry& g = e->storage_->geometry();
    RemoteTierClient::Config rc;
    rc.tier = opts.kv_remote.get();
    rc.prefix_caching = opts.prefix_caching;
    rc.wait_s = opts.kv_remote_wait_s;
    rc.model_tag = remote_model_tag(model_id, g.n_layers, g.kv_heads, g.head_dim, g.block_size, opts.kv_dtype);
    e->remote_ = std::make_unique<RemoteTierClient>(rc, e->kv_.get(), e->storage_.get());
    e->observers_.add(e->remote_->recorder());
    opts.kv_remote->set_notify([p = e.get()] { p->wake_.notify_all(); });
  }
  if (!e->observers_.empty()) e->kv_->set_block_observer(&e->observers_);
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
  if (kv_) kv_->set_block_observer(nullptr);
  if (opts_.kv_remote) opts_.kv_remote->set_notify(nullptr);
}

}  // namespace agentkv
