#include "workloads/relay_chain_engine.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include "format/gguf.h"
#include "model/model_spec.h"
#include "util/stats.h"

namespace agentkv {

Result<RelayEngine> relay_engine_create(const RelayBenchOptions& o, int64_t kv_tokens) {
  if (o.schemes.empty()) return make_error(ErrorCode::kInvalidArgument, "--schemes: no scheme given");
  bool has_none = false;
  for (const SchemeSpec& s : o.schemes) has_none = has_none || s.label == "none";
  if (!has_none) {
    return make_error(ErrorCode::kInvalidArgument,
                      "--schemes must include 'none' (the full-prefill reference)");
  }
  AKV_ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(o.model_path));
  AKV_ASSIGN_OR_RETURN(ModelSpec spec, model_spec_from_gguf(f));
  ServingOptions so;
  so.model_path = o.model_path;
  so.n_threads = o.n_threads;
  so.block_size = o.block_size;
  so.kv_dtype = o.kv_dtype;
  if (o.kv_cache_mb > 0) {
    so.kv_cache_mb = o.kv_cache_mb;
  } else {
    so.kv_cache_tokens = kv_tokens;
  }
  so.max_batch_tokens = o.max_batch_tokens;
  so.max_running = 64;
  so.prefix_caching = true;
  for (const SchemeSpec& s : o.schemes) {
    if (s.scheme == "relay") so.relay_profile = o.relay_profile;
  }
  RelayEngine r;
  AKV_ASSIGN_OR_RETURN(r.engine, create_serving_engine(so));
  r.n_layers = spec.n_layers;
  return r;
}

ServeRequest chain_request(std::vector<int32_t> prompt, const SchemeSpec& scheme, const std::string& salt,
                           int32_t max_tokens) {
  ServeRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.cache_salt = salt;
  r.kv_sharing = scheme.scheme;
  r.kv_sharing_params = scheme.params;
  return r;
}

Result<ChainAgentRun> chain_run_agent(ServingEngine& e, ServeRequest req, int32_t agent, int32_t n_layers) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  ChainAgentRun out;
  out.agent = agent;
  std::string error;
  auto id = e.submit(std::move(req), [&](ServeEvent&& ev) {
    std::lock_guard<std::mutex> lk(mu);
    for (const SampleResult& s : ev.samples) out.tokens.push_back(s.id);
    out.text += ev.text;
    if (ev.prompt_tokens > 0 && out.prompt_tokens == 0) {
      out.prompt_tokens = ev.prompt_tokens;
      out.cached_tokens = ev.cached_tokens;
      out.reused_tokens = ev.reused_tokens;
      out.prefill_token_layers = ev.prefill_token_layers;
      out.ttft_s = ev.ttft_s;
    }
    if (ev.finish != ServeFinish::kNone) {
      if (ev.finish == ServeFinish::kError) error = ev.error.empty() ? "request failed" : ev.error;
      if (ev.finish == ServeFinish::kCancelled) error = "request cancelled";
      out.completion_tokens = ev.completion_tokens;
      done = true;
      cv.notify_all();
    }
  });
  if (!id.is_ok()) return id.status().with_context("agent " + std::to_string(agent));
  std::unique_lock<std::mutex> lk(mu);
  cv.wait(lk, [&] { return done; });
  if (!error.empty()) return make_error(ErrorCode::kInternal, "agent ", agent, ": ", error);
  out.reuse_rate = chain_reuse_rate(out.prefill_token_layers, out.prompt_tokens, n_layers);
  return out;
}

double chain_reuse_rate(int64_t prefill_token_layers, int64_t prompt_tokens, int32_t n_layers) {
  const double dense = double(prompt_tokens) * double(n_layers);
  return dense > 0 ? 1.0 - double(prefill_token_layers) / dense : 0.0;
}

size_t chain_none_index(const RelayBenchOptions& o) {
  for (size_t k = 0; k < o.schemes.size(); ++k) {
    if (o.schemes[k].label == "none") return k;
  }
  return 0;
}

}  // namespace agentkv
