// `agentkv bench-forward`: prefill and decode throughput of the forward pass,
// as a table. Thread counts are interleaved within each repetition so that
// machine noise hits every configuration alike; medians are reported.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "cli/commands.h"
#include "cli/common.h"
#include "model/model_spec.h"
#include "runtime/sequence.h"

namespace agentkv::cli {

namespace {

struct BenchArgs {
  EngineOptions engine;
  std::vector<int> threads = {1, 2};
  std::vector<int> prompt_lens = {128, 512, 2048};
  int decode_ctx = 512;
  int decode_tokens = 64;
  int reps = 3;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::vector<int32_t> random_tokens(int n, int n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, n_vocab - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

void run(const BenchArgs& a) {
  using clock = std::chrono::steady_clock;
  std::vector<std::unique_ptr<Engine>> engines;
  int max_len = std::max(a.decode_ctx + a.decode_tokens, *std::max_element(a.prompt_lens.begin(), a.prompt_lens.end()));
  for (int t : a.threads) {
    EngineOptions o = a.engine;
    o.n_threads = t;
    o.n_ctx = std::max(o.n_ctx, max_len);
    std::fprintf(stderr, "[bench] loading %s with %d thread(s)\n", o.model_path.c_str(), t);
    auto e = Engine::create(o);
    if (!e.is_ok()) return fail(e.status());
    engines.push_back(std::move(e).value());
  }
  const int n_vocab = engines[0]->spec().n_vocab;
  // results[engine][test] = tok/s per rep; tests: prompt lens..., then decode
  const size_t n_tests = a.prompt_lens.size() + 1;
  std::vector<std::vector<std::vector<double>>> tps(engines.size(), std::vector<std::vector<double>>(n_tests));
  std::vector<float> logits;
  const int total = a.reps * static_cast<int>(engines.size() * n_tests);
  int done = 0;
  auto progress = [&](const char* what, int threads, int n) {
    std::fprintf(stderr, "\r[bench] %3d/%d  %-8s %5d tokens, %d thread(s)   ", ++done, total, what, n, threads);
    std::fflush(stderr);
  };
  // One untimed warm-up per engine: first touch of weights and scratch buffers.
  for (auto& e : engines) {
    auto seq = e->new_sequence();
    if (Status st = seq->append(random_tokens(a.prompt_lens[0], n_vocab, 1), &logits); !st.is_ok()) return fail(st);
  }
  for (int rep = 0; rep < a.reps; ++rep) {
    for (size_t e = 0; e < engines.size(); ++e) {
      for (size_t i = 0; i < a.prompt_lens.size(); ++i) {
        const int n = a.prompt_lens[i];
        progress("prefill", a.threads[e], n);
        auto toks = random_tokens(n, n_vocab, 1234 + i);
        auto seq = engines[e]->new_sequence();
        auto t0 = clock::now();
        if (Status st = seq->append(toks, &logits); !st.is_ok()) return fail(st);
        tps[e][i].push_back(n / std::chrono::duration<double>(clock::now() - t0).count());
      }
      progress("decode", a.threads[e], a.decode_tokens);
      auto seq = engines[e]->new_sequence();
      auto ctx = random_tokens(a.decode_ctx, n_vocab, 99);
      if (Status st = seq->append(ctx, &logits); !st.is_ok()) return fail(st);
      auto next = random_tokens(a.decode_tokens, n_vocab, 7);
      auto t0 = clock::now();
      for (int32_t tkn : next) {
        if (Status st = seq->append({&tkn, 1}, &logits); !st.is_ok()) return fail(st);
      }
      tps[e][n_tests - 1].push_back(a.decode_tokens / std::chrono::duration<double>(clock::now() - t0).count());
    }
  }
  std::fprintf(stderr, "\n");
  const ModelSpec& s = engines[0]->spec();
  std::printf("model: %s (%s, %d layers, d_model %d), backend cpu f32, %d reps, median tok/s\n\n",
              a.engine.model_path.c_str(), std::string(s.arch.name).c_str(), s.n_layers, s.d_model, a.reps);
  std::printf("| test | threads | tok/s (median) | min | max |\n|---|---|---|---|---|\n");
  for (size_t i = 0; i < n_tests; ++i) {
    for (size_t e = 0; e < engines.size(); ++e) {
      const auto& v = tps[e][i];
      std::string name = i + 1 < n_tests ? "prefill " + std::to_string(a.prompt_lens[i])
                                          : "decode @" + std::to_string(a.decode_ctx) + " (" +
                                                std::to_string(a.decode_tokens) + " tokens)";
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
  cmd->add_option("-r,--reps", a->reps, "repetitions (median reported)")->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->callback([a] { run(*a); });
}

}  // namespace agentkv::cli
