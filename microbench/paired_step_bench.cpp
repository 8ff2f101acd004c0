// The ICaRus paired decode step (ICaRus App. B, Alg. 3) against a plain
// decode step at the same context, on the runner alone: the encoder row
// (base, writes K/V) and the decoder row (a rank-r adapter on all seven
// targets, reads the cache only) in one Step, and as a control the same two
// rows without the adapter (a Step no request produces, so it is built by
// hand here and not through the serving engine). Thread counts interleaved
// step by step within each round; medians (docs/benchmarks.md, "ICaRus paired
// decode step").
//
// Usage: bench_paired_step [-m MODEL] [--rank 8] [--thread-counts 1,2] [--decode-ctx 512] [-r 5] [--steps 20]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "adapter/adapter.h"
#include "backend/backend.h"
#include "kv/kv_storage.h"
#include "model/loader.h"
#include "runtime/runner.h"
#include "util/random_tokens.h"
#include "util/stats.h"

using namespace agentkv;

namespace {

struct PairedArgs {
  std::string model_path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  std::vector<int> threads = {1, 2};
  int32_t block_size = 16;
  int decode_ctx = 512;
  int reps = 3;
  int rank = 8;
  int steps = 20;  // timed steps of each kind per round
  std::string act_quant = "q8";
};

int failed(const Status& st) {
  std::fprintf(stderr, "error: %s\n", st.message().c_str());
  return 1;
}

// A rank-r adapter on all seven targets with random weights (timing only: the
// values do not matter, the shapes do).
Adapter random_adapter_for(const Model& m, int32_t rank) {
  const ModelSpec& s = m.spec;
  const int64_t dims[kLoraTargetCount][2] = {
      {s.d_model, s.q_dim()}, {s.d_model, s.kv_dim()}, {s.d_model, s.kv_dim()}, {s.q_dim(), s.d_model},
      {s.d_model, s.ffn_dim}, {s.d_model, s.ffn_dim},  {s.ffn_dim, s.d_model}};
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Adapter a;
  a.name = "bench-r" + std::to_string(rank);
  a.kind = AdapterKind::kIcarus;
  a.rank = rank;
  a.layers.resize(s.n_layers);
  for (auto& layer : a.layers) {
    for (int32_t t = 0; t < kLoraTargetCount; ++t) {
      LoraMatrix& lm = layer.m[t];
      lm.rank = rank;
      lm.d_in = dims[t][0];
      lm.d_out = dims[t][1];
      lm.scale = 2.0f;
      lm.a.resize(size_t(rank * lm.d_in));
      lm.b.resize(size_t(lm.d_out * rank));
      for (auto& x : lm.a) x = nd(rng) / std::sqrt(float(lm.d_in));
      for (auto& x : lm.b) x = 0.01f * nd(rng);
    }
  }
  return a;
}

// Plain 1-row decode step vs the paired encoder + decoder step, both at
// position decode_ctx (the step is re-run there, so the context stays fixed),
// interleaved step by step within each round and across thread counts.
int run_paired(const PairedArgs& a) {
  using clock = std::chrono::steady_clock;
  const int max_threads = *std::max_element(a.threads.begin(), a.threads.end());
  std::fprintf(stderr, "[bench] loading %s\n", a.model_path.c_str());
  auto loaded =
      model_load_file(a.model_path, {.n_threads = max_threads, .packed_only = backend_cpu_reads_packed});
  if (!loaded.is_ok()) return failed(loaded.status());
  std::shared_ptr<const Model> model = *loaded;
  const ModelSpec& s = model->spec;
  const Adapter adapter = random_adapter_for(*model, a.rank);
  const int32_t bs = a.block_size, ctx = a.decode_ctx;
  const int32_t n_blocks = (ctx + 1 + bs - 1) / bs;

  struct Rig {
    std::unique_ptr<backend_i> backend;
    std::unique_ptr<KvStorage> kv;
    std::unique_ptr<Runner> runner;
    Step plain, paired, two_rows;  // two_rows: the pair with the decoder on base weights (no LoRA)
  };
  std::vector<Rig> rigs;
  std::vector<int32_t> blocks(n_blocks);
  for (int32_t i = 0; i < n_blocks; ++i) blocks[i] = i;
  const auto ctx_toks = random_tokens(ctx + 1, s.n_vocab, 99);
  std::vector<float> logits;
  for (int t : a.threads) {
    Rig r;
    r.backend = backend_cpu_init(BackendConfig{t, *act_quant_parse(a.act_quant)});
    auto kv = KvStorage::create({s.n_layers, s.n_kv_heads, s.head_dim, bs}, n_blocks);
    if (!kv.is_ok()) return failed(kv.status());
    r.kv = std::make_unique<KvStorage>(std::move(kv).value());
    r.runner = std::make_unique<Runner>(model, r.backend.get(), r.kv.get());
    // The context's K/V, written by base rows in one prefill Step.
    Step prefill;
    for (int32_t p = 0; p < ctx; ++p)
      prefill.rows.push_back(
          TokenRow{ctx_toks[p], p, int64_t{blocks[p / bs]} * bs + p % bs, p == ctx - 1, -1});
    prefill.seqs = {StepSeq{0, ctx, blocks}};
    std::fprintf(stderr, "[bench] prefill %d tokens, %d thread(s)\n", ctx, t);
    if (Status st = r.runner->execute(prefill, &logits); !st.is_ok()) return failed(st);
    const int64_t slot = int64_t{blocks[ctx / bs]} * bs + ctx % bs;
    r.plain.rows = {TokenRow{ctx_toks[ctx], ctx, slot, true, -1}};
    r.plain.seqs = {StepSeq{0, 1, blocks}};
    r.paired.adapters = {&adapter};
    r.paired.rows = {TokenRow{ctx_toks[ctx], ctx, slot, false, -1},
                     TokenRow{ctx_toks[ctx], ctx, -1, true, 0}};
    r.paired.seqs = {StepSeq{0, 2, blocks}};
    r.two_rows = r.paired;
    r.two_rows.adapters.clear();
    r.two_rows.rows[1].adapter = -1;
    for (int w = 0; w < 3; ++w) {  // warm-up: first touch of scratch and adapter weights
      if (Status st = r.runner->execute(r.plain, &logits); !st.is_ok()) return failed(st);
      if (Status st = r.runner->execute(r.paired, &logits); !st.is_ok()) return failed(st);
      if (Status st = r.runner->execute(r.two_rows, &logits); !st.is_ok()) return failed(st);
    }
    rigs.push_back(std::move(r));
  }
  // ms[rig][0 plain, 1 paired, 2 two rows without the adapter]
  std::vector<std::array<std::vector<double>, 3>> ms(rigs.size());
  for (int rep = 0; rep < a.reps; ++rep) {
    for (size_t e = 0; e < rigs.size(); ++e) {
      std::fprintf(stderr, "\r[bench] round %d/%d, %d thread(s)   ", rep + 1, a.reps, a.threads[e]);
      std::fflush(stderr);
      for (int i = 0; i < a.steps; ++i) {
        for (int kind = 0; kind < 3; ++kind) {
          const Step& step = kind == 0 ? rigs[e].plain : kind == 1 ? rigs[e].paired : rigs[e].two_rows;
          auto t0 = clock::now();
          if (Status st = rigs[e].runner->execute(step, &logits); !st.is_ok()) return failed(st);
          ms[e][kind].push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count());
        }
      }
    }
  }
  std::fprintf(stderr, "\n");
  std::printf(
      "model: %s (%s, %d layers, d_model %d), backend cpu, activations %s, context %d, adapter rank %d on "
      "q,k,v,o,gate,"
      "up,down; %d rounds x %d steps of each kind, interleaved; median ms per step\n\n",
      a.model_path.c_str(), std::string(s.arch.name).c_str(), s.n_layers, s.d_model, a.act_quant.c_str(), ctx,
      a.rank, a.reps, a.steps);
  // The last column splits the paired step's extra cost: two rows through
  // the base weights and attention, without the adapter's LoRA.
  std::printf(
      "| threads | decode step (1 row) ms | paired step (encoder + decoder) ms | ratio | paired without "
      "LoRA ms | ratio |\n|---|---|---|---|---|---|\n");
  for (size_t e = 0; e < rigs.size(); ++e) {
    const double p = median(ms[e][0]), q = median(ms[e][1]), w = median(ms[e][2]);
    std::printf("| %d | %.2f | %.2f | %.3f | %.2f | %.3f |\n", a.threads[e], p, q, q / p, w, w / p);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  PairedArgs a;
  CLI::App app{
      "The ICaRus paired decode step (encoder + rank-r decoder row) against a plain decode step, on the "
      "runner"};
  app.add_option("-m,--model", a.model_path, "model GGUF")->capture_default_str();
  app.add_option("--rank", a.rank, "the decoder adapter's rank (all seven targets)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--thread-counts", a.threads, "thread counts, interleaved")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--decode-ctx", a.decode_ctx, "context before the timed step")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("-r,--reps", a.reps, "rounds (median over all)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--steps", a.steps, "timed steps of each kind per round")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--block-size", a.block_size, "KV block size")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--act-quant", a.act_quant, "activations of quantized products: q8 or f32")
      ->capture_default_str()
      ->check(CLI::IsMember({"q8", "f32"}));
  CLI11_PARSE(app, argc, argv);
  if (a.threads.empty()) return failed(make_error(ErrorCode::kInvalidArgument, "--thread-counts is empty"));
  return run_paired(a);
}
