#include "agentkv/engine.h"

#include <chrono>

#include "backend/backend.h"
#include "kv/block_pool.h"
#include "kv/kv_storage.h"
#include "runtime/loaded_model.h"
#include "runtime/runner.h"
#include "runtime/sequence.h"
#include "runtime/stop_matcher.h"
#include "tokenizer/tokenizer.h"

namespace agentkv {

struct Engine::Impl {
  EngineOptions opts;
  std::shared_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<backend_i> backend;
  std::unique_ptr<KvStorage> kv;
  std::unique_ptr<BlockPool> pool;
  std::unique_ptr<Runner> runner;
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::create(const EngineOptions& opts) {
  if (opts.n_threads < 1) return make_error(ErrorCode::kInvalidArgument, "--threads must be >= 1");
  if (opts.n_ctx < 1) return make_error(ErrorCode::kInvalidArgument, "--ctx-size must be >= 1");
  if (opts.block_size < 1 || opts.block_size > 1024) {
    return make_error(ErrorCode::kInvalidArgument, "--block-size must be in [1, 1024]");
  }
  auto impl = std::make_unique<Impl>();
  impl->opts = opts;
  AKV_ASSIGN_OR_RETURN(LoadedModel lm, load_model_file(opts.model_path, opts.n_threads));
  impl->model = std::move(lm.model);
  impl->tokenizer = std::move(lm.tokenizer);
  const ModelSpec& s = impl->model->spec;

  BackendConfig bc;
  bc.n_threads = opts.n_threads;
  impl->backend = backend_cpu_init(bc);

  KvGeometry g{s.n_layers, s.n_kv_heads, s.head_dim, opts.block_size};
  const int64_t n_blocks = (int64_t{opts.n_ctx} + opts.block_size - 1) / opts.block_size;
  auto kv = KvStorage::create(g, n_blocks);
  if (!kv.is_ok()) return kv.status();
  impl->kv = std::make_unique<KvStorage>(std::move(kv).value());
  impl->pool = std::make_unique<BlockPool>(static_cast<int32_t>(n_blocks));
  impl->runner = std::make_unique<Runner>(impl->model, impl->backend.get(), impl->kv.get());
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

const ModelSpec& Engine::spec() const { return impl_->model->spec; }
const Tokenizer& Engine::tokenizer() const { return *impl_->tokenizer; }
const EngineOptions& Engine::options() const { return impl_->opts; }

std::unique_ptr<SequenceState> Engine::new_sequence() {
  return std::make_unique<SequenceState>(impl_->runner.get(), impl_->pool.get(), impl_->opts.block_size,
                                         impl_->opts.ubatch);
}

Result<GenerateResult> Engine::generate(const std::vector<int32_t>& prompt, const SamplingParams& sampling,
                                        const GenerateOptions& gen,
                                        const std::function<void(const std::string&)>& on_text) {
  using clock = std::chrono::steady_clock;
  AKV_RETURN_IF_ERROR(sampling.validate());
  if (prompt.empty()) return make_error(ErrorCode::kInvalidArgument, "the prompt is empty");
  if (gen.max_tokens < 0) return make_error(ErrorCode::kInvalidArgument, "max tokens must be >= 0");
  if (static_cast<int64_t>(prompt.size()) > impl_->opts.n_ctx) {
    return make_error(ErrorCode::kOutOfRange, "prompt of ", prompt.size(), " tokens exceeds the context size ",
                      impl_->opts.n_ctx, "; raise --ctx-size");
  }
  GenerateResult res;
  res.prompt_tokens = static_cast<int32_t>(prompt.size());
  auto seq = new_sequence();
  Sampler sampler(sampling);
  StopMatcher stops(gen.stop);
  StreamDecoder detok(*impl_->tokenizer);
  std::vector<float> logits;

  auto t0 = clock::now();
  AKV_RETURN_IF_ERROR(seq->append(prompt, &logits));
  auto t1 = clock::now();
  res.prefill_s = std::chrono::duration<double>(t1 - t0).count();

  auto emit = [&](const std::string& piece) {
    if (piece.empty()) return;
    res.text += piece;
    if (on_text) on_text(piece);
  };
  for (int32_t i = 0; i < gen.max_tokens; ++i) {
    SampleResult sr = sampler.sample(logits);
    if (!gen.ignore_eos && impl_->tokenizer->is_eog(sr.id)) {
      res.finish = FinishReason::kStop;
      break;
    }
    res.tokens.push_back(sr.id);
    res.samples.push_back(std::move(sr));
    emit(stops.push(detok.push(res.tokens.back())));
    if (stops.stopped()) {
      res.finish = FinishReason::kStop;
      break;
    }
    if (i + 1 == gen.max_tokens) break;
    if (seq->n_past() >= impl_->opts.n_ctx) break;  // context full: finish as "length"
    int32_t next = res.tokens.back();
    AKV_RETURN_IF_ERROR(seq->append({&next, 1}, &logits));
  }
  if (!stops.stopped()) emit(stops.push(detok.flush()) + stops.flush());
  res.decode_s = std::chrono::duration<double>(clock::now() - t1).count();
  return res;
}

}  // namespace agentkv
