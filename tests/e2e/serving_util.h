// Helpers for the serving-engine e2e tests: the model path, a synchronous
// driver that submits requests and collects their events, and the bitwise
// comparison of two runs.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <initializer_list>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "adapter/synth_adapter.h"
#include "agentkv/serving.h"
#include "source_dir.h"

namespace agentkv::testing {

inline std::string model_path() {
  if (const char* e = std::getenv("AGENTKV_MODEL"); e && *e) return e;
  return agentkv::test::source_dir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// Text-like token ids for prompts: n ids in [1000, 9000) from a seed. Real
// word pieces keep attention patterns realistic.
inline std::vector<int32_t> doc(uint32_t seed, int n) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = 1000 + static_cast<int32_t>(rng() % 8000);
  return t;
}

inline std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;                 // chosen token
  std::vector<std::vector<float>> top;         // top-N logprobs per token
  std::vector<std::vector<float>> logits;      // ServeRequestHooks::return_logits: per event that sampled
  ServeFinish finish = ServeFinish::kNone;
  int32_t cached = 0;
  int32_t reused = 0;  // prompt tokens copied from cached segments
  int64_t prefill_token_layers = 0;  // K/V entries the prompt's prefill computed
  std::string text;
  std::string error;
};

// Submits every request at once and waits for all of them.
inline std::vector<Outcome> serve_requests(ServingEngine& eng, std::vector<ServeRequest> reqs) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Outcome> out(reqs.size());
  size_t n_done = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    ServeRequest req = std::move(reqs[i]);
    auto id = eng.submit(std::move(req), [&, i](ServeEvent&& ev) {
      std::lock_guard<std::mutex> lk(mu);
      Outcome& o = out[i];
      for (const SampleResult& s : ev.samples) {
        o.tokens.push_back(s.id);
        o.logprobs.push_back(s.logprob);
        std::vector<float> t;
        for (const auto& x : s.top) t.push_back(x.logprob);
        o.top.push_back(std::move(t));
      }
      o.text += ev.text;
      if (!ev.logits.empty()) o.logits.push_back(std::move(ev.logits));
      if (ev.prompt_tokens) {
        o.cached = ev.cached_tokens, o.reused = ev.reused_tokens, o.prefill_token_layers = ev.prefill_token_layers;
      }
      if (ev.finish != ServeFinish::kNone) {
        o.finish = ev.finish;
        o.error = ev.error;
        ++n_done;
        cv.notify_all();
      }
    });
    EXPECT_TRUE(id.is_ok()) << id.status().message();
    if (!id.is_ok()) {
      std::lock_guard<std::mutex> lk(mu);
      ++n_done;
    }
  }
  std::unique_lock<std::mutex> lk(mu);
  cv.wait(lk, [&] { return n_done == out.size(); });
  return out;
}

// Greedy, EOS ignored, 3 top logprobs: the exactness tests' request.
inline ServeRequest greedy_request(std::vector<int32_t> prompt, int max_tokens) {
  ServeRequest req;
  req.prompt = std::move(prompt);
  req.max_tokens = max_tokens;
  req.ignore_eos = true;
  req.sampling.n_logprobs = 3;
  return req;
}

inline std::vector<Outcome> serve_all(ServingEngine& eng, const std::vector<std::vector<int32_t>>& prompts,
                                      int max_tokens, const std::vector<std::string>& tenants = {}) {
  std::vector<ServeRequest> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    reqs.push_back(greedy_request(prompts[i], max_tokens));
    if (!tenants.empty()) reqs.back().tenant = tenants[i];
  }
  return serve_requests(eng, std::move(reqs));
}

// Exact means bitwise (docs/design.md §4): every CPU kernel keeps one reduction
// order per row whatever the Step's row count, its other rows and the thread
// count (backend/cpu/dot_tile.h), so two runs of the same request compare
// equal, tokens and logprobs, with no tolerance.
// Random PEFT adapters written by `agentkv synth-adapter`'s code into dir,
// one per (name, seed): every module's delta is ~3% of the base projection's
// output. The one named "alora" carries the invocation tokens (an aLoRA).
inline void write_synth_adapters(const Model& model, const std::string& dir,
                                 std::initializer_list<std::pair<const char*, uint64_t>> adapters,
                                 const std::vector<int32_t>& invocation) {
  for (const auto& [name, seed] : adapters) {
    SynthAdapterConfig c;
    c.seed = seed;
    if (std::string(name) == "alora") c.invocation_tokens = invocation;
    auto r = synth_adapter_write(c, model, dir + "/" + name);
    ASSERT_TRUE(r.is_ok()) << name << ": " << r.status().message();
  }
}

inline void expect_same(const Outcome& a, const Outcome& b, const std::string& what) {
  ASSERT_EQ(a.tokens, b.tokens) << what;
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << what;
  for (size_t t = 0; t < a.logprobs.size(); ++t) {
    EXPECT_EQ(a.logprobs[t], b.logprobs[t]) << what << " token " << t;
    EXPECT_EQ(a.top[t], b.top[t]) << what << " token " << t;
  }
}

}  // namespace agentkv::testing
