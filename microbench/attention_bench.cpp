// Paged attention of the SmolLM2-135M layer shape (9 query heads, 3 kv heads,
// head_dim 64, block_size 16): a 2048-token prefill and decode rows at
// several contexts, per thread count, on an f32 or f16 cache. Prints a
// table of medians.
//
// Usage: bench_attention [--threads 1,2] [--reps N] [--kv-dtype f32|f16] [--only TEXT]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "format/fp16.h"
#include "util/stats.h"

using namespace agentkv;

namespace {

struct Scenario {
  std::string name;
  int32_t kv_len;
  std::vector<int32_t> rows;  // query positions (one sequence)
};

// CPU time of the calling thread: on a shared machine it is not inflated by
// waiting for a core, unlike wall time (meaningful for 1 thread only).
double thread_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads = {1, 2};
  int reps = 7;
  std::string kv_dtype = "f32";
  std::string only;
  CLI::App app{"The CPU backend's paged attention on SmolLM2-135M shapes"};
  app.add_option("--threads", threads, "thread counts, comma-separated")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--reps", reps, "repetitions (medians)")->check(CLI::PositiveNumber);
  app.add_option("--kv-dtype", kv_dtype, "element type of the cache (f16 is agentkv's default)")
      ->check(CLI::IsMember({"f32", "f16"}));
  app.add_option("--only", only,
                 "run the scenarios whose name contains this text (e.g. decode, \"prefill 512\")");
  CLI11_PARSE(app, argc, argv);
  const int32_t n_heads = 9, kv_heads = 3, D = 64, bs = 16;
  std::vector<Scenario> scenarios;
  {
    std::vector<int32_t> all(2048);
    std::iota(all.begin(), all.end(), 0);
    scenarios.push_back({"prefill 2048", 2048, all});
    scenarios.push_back({"prefill 512", 512, std::vector<int32_t>(all.begin(), all.begin() + 512)});
    std::vector<int32_t> chunk(512);
    std::iota(chunk.begin(), chunk.end(), 1536);
    scenarios.push_back({"prefill chunk 512 @1536", 2048, chunk});
    for (int32_t ctx : {128, 512, 2048})
      scenarios.push_back({"decode @" + std::to_string(ctx), ctx, {ctx - 1}});
  }
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int32_t n_blocks = 2048 / bs;
  const int64_t stride = int64_t(bs) * kv_heads * D;
  std::vector<float> k(stride * n_blocks), v(stride * n_blocks);
  for (auto& x : k) x = dist(rng);
  for (auto& x : v) x = dist(rng);
  std::vector<int32_t> block_ids(n_blocks);
  std::iota(block_ids.begin(), block_ids.end(), 0);
  std::shuffle(block_ids.begin(), block_ids.end(), rng);
  KvLayerView kv{k.data(), v.data(), stride, bs, kv_heads, D};
  std::vector<uint16_t> k16, v16;  // the same values rounded to f16
  if (kv_dtype == "f16") {
    for (float x : k) k16.push_back(f32_to_fp16(x));
    for (float x : v) v16.push_back(f32_to_fp16(x));
    kv = KvLayerView{k16.data(), v16.data(), stride, bs, kv_heads, D, KvDType::kF16};
  }

  std::printf("| scenario | threads | median ms | GFLOP/s | caller CPU ms |\n|---|---:|---:|---:|---:|\n");
  for (const auto& sc : scenarios) {
    if (sc.name.find(only) == std::string::npos) continue;
    const int32_t n_rows = int32_t(sc.rows.size());
    std::vector<float> q(size_t(n_rows) * n_heads * D), out(q.size());
    for (auto& x : q) x = dist(rng);
    std::vector<int32_t> row_indptr = {0, n_rows}, block_indptr = {0, (sc.kv_len + bs - 1) / bs};
    AttentionPlan plan{1, row_indptr.data(), sc.rows.data(), block_indptr.data(), block_ids.data()};
    double flops = 0;
    for (int32_t p : sc.rows) flops += 4.0 * n_heads * D * (p + 1);  // q·k and p·v
    // Interleave thread counts round by round.
    std::vector<std::unique_ptr<backend_i>> bes;
    for (int t : threads) bes.push_back(backend_cpu_init({.n_threads = t}));
    std::vector<std::vector<double>> ms(threads.size()), cpu(threads.size());
    for (int r = 0; r < reps + 1; ++r)
      for (size_t i = 0; i < bes.size(); ++i) {
        auto t0 = std::chrono::steady_clock::now();
        double c0 = thread_cpu_s();
        int inner = n_rows == 1 ? 200 : 1;
        for (int j = 0; j < inner; ++j)
          bes[i]->attention(plan, q.data(), n_heads, kv, 1.0f / std::sqrt(float(D)), out.data());
        double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / inner;
        double dc = (thread_cpu_s() - c0) / inner;
        if (r > 0) ms[i].push_back(dt * 1e3), cpu[i].push_back(dc * 1e3);  // round 0 warms up
      }
    for (size_t i = 0; i < bes.size(); ++i) {
      double med = median(ms[i]);
      std::printf("| %s | %d | %.3f | %.1f | %.3f |\n", sc.name.c_str(), threads[i], med, flops / med * 1e-6,
                  median(cpu[i]));
    }
  }
  return 0;
}
