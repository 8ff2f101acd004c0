#include "workloads/engine_requests.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "runtime/engine_client.h"
#include "util/stats.h"

namespace agentkv::bench {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

std::vector<Done> run_together(ServingEngine& eng, std::vector<ServeRequest> reqs) {
  std::vector<Done> out(reqs.size());
  const Clock::time_point t0 = Clock::now();
  std::vector<Result<ServeEvent>> last =
      serve_together(eng, std::move(reqs), [&](size_t i, const ServeEvent& ev, Clock::time_point at) {
        Done& d = out[i];
        for (const SampleResult& s : ev.samples) d.tokens.push_back(s.id);
        if (ev.prompt_tokens) {
          d.prompt_tokens = ev.prompt_tokens;
          d.cached = ev.cached_tokens;
          if (d.ttft_s == 0) d.ttft_s = ev.ttft_s;
        }
        if (ev.finish != ServeFinish::kNone) {
          d.e2e_s = std::chrono::duration<double>(at - t0).count();
          d.prefill_token_layers = ev.prefill_token_layers;
          d.reused = ev.reused_tokens;
          d.lr_fallback = ev.lr_fallback;
        }
      });
  for (size_t i = 0; i < out.size(); ++i) {
    if (!last[i].is_ok()) out[i].error = last[i].status().message();
  }
  return out;
}

ServeRequest request(std::vector<int32_t> prompt, int32_t max_tokens, const std::string& adapter) {
  ServeRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.adapter = adapter;
  return r;
}

std::vector<int32_t> random_prompt(int32_t n, int32_t n_vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> d(std::min(1000, n_vocab / 2), n_vocab - 1);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

Status first_error(const std::vector<Done>& v) {
  for (const Done& d : v) {
    if (!d.error.empty()) return make_error(ErrorCode::kInternal, "a benchmark request failed: ", d.error);
  }
  return Status::ok();
}

}  // namespace agentkv::bench
