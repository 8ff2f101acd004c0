#include "cli/generate_serving.h"

#include <utility>

namespace agentkv::cli {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

Result<ServingGenerateResult> generate_serving(ServingEngine& engine, const std::vector<int32_t>& prompt,
                                               const ServingGenerateOptions& o,
                                               const std::function<void(const std::string&)>& on_text) {
  ServeRequest req;
  req.prompt = prompt;
  req.sampling = o.sampling;
  req.max_tokens = o.max_tokens;
  req.stop = o.stop;
  req.ignore_eos = o.ignore_eos;
  req.kv_sharing = o.kv_sharing;
  if (o.base_first) {
    ServeRequest base = req;
    base.adapter.clear();
    base.max_tokens = 1;  // the prompt's KV is what the adapter may reuse
    AKV_RETURN_IF_ERROR(serve_one(engine, std::move(base)).status().with_context("--base-first"));
  }
  req.adapter = o.adapter;
  const auto t0 = Clock::now();
  ServingGenerateResult r;
  AKV_ASSIGN_OR_RETURN(ServeEvent last,
                       serve_one(engine, std::move(req), [&](const ServeEvent& e, Clock::time_point) {
                         if (on_text && !e.text.empty()) on_text(e.text);
                         r.samples.insert(r.samples.end(), e.samples.begin(), e.samples.end());
                       }));
  r.prompt_tokens = last.prompt_tokens;
  r.cached_tokens = last.cached_tokens;
  r.completion_tokens = last.completion_tokens;
  r.ttft_s = last.ttft_s;
  r.total_s = std::chrono::duration<double>(Clock::now() - t0).count();
  r.finish = serve_finish_name(last.finish);
  return r;
}

}  // namespace agentkv::cli
