// `agentkv bench-forward`: prefill and decode throughput of the forward pass,
// as a table, measured through the serving engine (scheduler, runner, KV
// manager, sampler) that every command runs. Thread counts are interleaved
// within each repetition so that machine noise hits every configuration
// alike; medians are reported.
// The ICaRus paired decode step, timed on the runner alone, is
// microbench/paired_step_bench.cpp.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/generate_serving.h"
#include "format/gguf.h"
#include "model/model_spec.h"
#include "util/random_tokens.h"
#include "util/stats.h"

namespace agentkv::cli {

namespace {

struct BenchArgs {
  EngineArgs engine;
  std::vector<int> threads = {1, 2};
  std::vector<int> prompt_lens = {128, 512, 2048};
  int decode_ctx = 512;
  int decode_tokens = 64;
  int decode_batch = 1;  // sequences decoding together in the decode test
  int reps = 3;
};

// One request alone on `engine`, to the end.
struct Timed {
  double ttft_s = 0;    // the engine's: submit -> first token (the prefill, plus one sample)
  double decode_s = 0;  // first token -> last token, as the engine delivered them
  int32_t n_tokens = 0;
};

Result<Timed> run_timed(ServingEngine& engine, std::vector<int32_t> prompt, int32_t max_tokens) {
  ServeRequest req;
  req.prompt = std::move(prompt);
  req.max_tokens = max_tokens;
  req.ignore_eos = true;
  req.sampling.logprob = false;  // as a server request without logprobs (llama-bench computes none)
  std::chrono::steady_clock::time_point first, last;
  bool seen = false;
  AKV_ASSIGN_OR_RETURN(ServeEvent end, serve_one(engine, std::move(req), [&](const ServeEvent& e, auto at) {
                         if (e.samples.empty()) return;
                         if (!seen) first = at;
                         seen = true;
                         last = at;
                       }));
  if (end.completion_tokens != max_tokens) {
    return make_error(ErrorCode::kInternal, "the engine generated ", end.completion_tokens, " tokens, not ",
                      max_tokens);
  }
  return Timed{end.ttft_s, std::chrono::duration<double>(last - first).count(), end.completion_tokens};
}

// n requests of `ctx` random tokens each, submitted together, each decoding
// `tokens` + 1 tokens: the decode tokens/s of all of them once every one has
// its first token (the prefills done; llama-batched-bench's S_TG).
Result<double> batch_decode_tps(ServingEngine& engine, int n, int ctx, int tokens, int n_vocab) {
  using Clock = std::chrono::steady_clock;
  std::vector<std::vector<Clock::time_point>> times(n);
  std::vector<Status> errs(n);
  std::vector<std::thread> th;
  for (int i = 0; i < n; ++i) {
    th.emplace_back([&, i] {
      ServeRequest req;
      req.prompt = random_tokens(ctx, n_vocab, 99 + i);
      req.max_tokens = tokens + 1;
      req.ignore_eos = true;
      req.sampling.logprob = false;
      auto end = serve_one(engine, std::move(req), [&](const ServeEvent& e, auto at) {
        for (size_t k = 0; k < e.samples.size(); ++k) times[i].push_back(at);
      });
      errs[i] = end.status();
    });
  }
  for (auto& t : th) t.join();
  Clock::time_point start{}, end{};
  for (int i = 0; i < n; ++i) {
    if (!errs[i].is_ok()) return errs[i];
    if (int(times[i].size()) != tokens + 1) return make_error(ErrorCode::kInternal, "a request stopped early");
    start = std::max(start, times[i].front());
    end = std::max(end, times[i].back());
  }
  int64_t after = 0;  // tokens delivered after the last first token
  for (const auto& v : times)
    for (auto t : v) after += t > start;
  const double s = std::chrono::duration<double>(end - start).count();
  if (after == 0 || s <= 0) return make_error(ErrorCode::kInternal, "no decode step after the prefills");
  return after / s;
}

// Each figure is one request alone on a serving engine (prefix caching off,
// so a repeated prompt is computed again): prefill = N prompt tokens / the
// engine's time to first token; decode = the tokens after the first / the
// time between the first and the last, so the prefill of the context is not
// in it.
void run(const BenchArgs& a) {
  auto file = GgufFile::open(a.engine.model_path);
  if (!file.is_ok()) return fail(file.status());
  auto spec = model_spec_from_gguf(*file);
  if (!spec.is_ok()) return fail(spec.status().with_context(a.engine.model_path));
  const ModelSpec& s = *spec;
  const int max_len =
      std::max(a.decode_ctx + a.decode_tokens, *std::max_element(a.prompt_lens.begin(), a.prompt_lens.end()));
  std::vector<std::unique_ptr<ServingEngine>> engines;
  for (int t : a.threads) {
    ServingOptions o = serving_options(a.engine);
    o.n_threads = t;
    o.prefix_caching = false;
    // + 1: the token sampled after the prompt; the decode test's sequences at once.
    o.kv_cache_tokens = std::max(a.engine.n_ctx, (max_len + 1 + a.engine.block_size) * a.decode_batch);
    o.max_model_len = static_cast<int32_t>(std::max(a.engine.n_ctx, max_len + 1));
    std::fprintf(stderr, "[bench] loading %s with %d thread(s)\n", o.model_path.c_str(), t);
    auto e = create_serving_engine(o);
    if (!e.is_ok()) return fail(e.status());
    engines.push_back(std::move(e).value());
  }
  const int n_vocab = engines[0]->vocab_size();
  // results[engine][test] = tok/s per rep; tests: prompt lens..., then decode
  const size_t n_tests = a.prompt_lens.size() + 1;
  std::vector<std::vector<std::vector<double>>> tps(engines.size(),
                                                    std::vector<std::vector<double>>(n_tests));
  const int total = a.reps * static_cast<int>(engines.size() * n_tests);
  int done = 0;
  auto progress = [&](const char* what, int threads, int n) {
    std::fprintf(stderr, "\r[bench] %3d/%d  %-8s %5d tokens, %d thread(s)   ", ++done, total, what, n, threads);
    std::fflush(stderr);
  };
  // One untimed warm-up per engine: first touch of weights and scratch buffers.
  for (auto& e : engines) {
    if (auto r = run_timed(*e, random_tokens(a.prompt_lens[0], n_vocab, 1), 2); !r.is_ok())
      return fail(r.status());
  }
  for (int rep = 0; rep < a.reps; ++rep) {
    for (size_t e = 0; e < engines.size(); ++e) {
      for (size_t i = 0; i < a.prompt_lens.size(); ++i) {
        const int n = a.prompt_lens[i];
        progress("prefill", a.threads[e], n);
        auto r = run_timed(*engines[e], random_tokens(n, n_vocab, 1234 + i), 1);
        if (!r.is_ok()) return fail(r.status());
        tps[e][i].push_back(n / r->ttft_s);
      }
      progress("decode", a.threads[e], a.decode_tokens);
      if (a.decode_batch > 1) {
        auto r = batch_decode_tps(*engines[e], a.decode_batch, a.decode_ctx, a.decode_tokens, n_vocab);
        if (!r.is_ok()) return fail(r.status());
        tps[e][n_tests - 1].push_back(*r);
        continue;
      }
      auto r = run_timed(*engines[e], random_tokens(a.decode_ctx, n_vocab, 99), a.decode_tokens + 1);
      if (!r.is_ok()) return fail(r.status());
      tps[e][n_tests - 1].push_back(a.decode_tokens / r->decode_s);
    }
  }
  std::fprintf(stderr, "\n");
  std::printf("model: %s (%s, %d layers, d_model %d), backend cpu, KV %s, activations %s, %d reps, median tok/s\n\n",
              a.engine.model_path.c_str(), std::string(s.arch.name).c_str(), s.n_layers, s.d_model,
              a.engine.kv_dtype.c_str(), a.engine.act_quant.c_str(), a.reps);
  std::printf("| test | threads | tok/s (median) | min | max |\n|---|---|---|---|---|\n");
  for (size_t i = 0; i < n_tests; ++i) {
    for (size_t e = 0; e < engines.size(); ++e) {
      const auto& v = tps[e][i];
      std::string name = i + 1 < n_tests ? "prefill " + std::to_string(a.prompt_lens[i])
                                          : "decode @" + std::to_string(a.decode_ctx) +
                                                (a.decode_batch > 1 ? " x" + std::to_string(a.decode_batch) : "") +
                                                " (" + std::to_string(a.decode_tokens) + " tokens)";
      std::printf("| %s | %d | %.1f | %.1f | %.1f |\n", name.c_str(), a.threads[e], median(v),
                  *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()));
    }
  }
}

}  // namespace

void register_bench_forward(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench-forward", "Measure prefill and decode tokens/s of the forward pass");
  add_engine_options(cmd, &a->engine);
  cmd->add_option("--thread-counts", a->threads, "thread counts to compare, interleaved")->capture_default_str()
      ->delimiter(',');
  cmd->add_option("--prompt-lens", a->prompt_lens, "prefill lengths")->capture_default_str()->delimiter(',');
  cmd->add_option("--decode-ctx", a->decode_ctx, "context length before decoding")->capture_default_str();
  cmd->add_option("--decode-tokens", a->decode_tokens, "decode steps timed")->capture_default_str();
  cmd->add_option("--decode-batch", a->decode_batch,
                  "sequences decoding at once in the decode test (each its own --decode-ctx context); > 1: "
                  "tokens/s of all of them once every prefill is done, as llama-batched-bench's S_TG")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("-r,--reps", a->reps, "repetitions (median reported)")->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->callback([a] { run(*a); });
}

}  // namespace agentkv::cli
