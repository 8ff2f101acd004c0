// Flash-LoRA-Attention's cost (LRAgent Alg. 1; docs/benchmarks.md,
// "Flash-LoRA-Attention") on the SmolLM2-135M layer shape (9 query heads, 3
// kv heads, head_dim 64, block 16) at rank r: plain attention over V_base,
// the fused rank-r accumulator, V expanded per call (what an engine without
// it does) and the automatic choice, interleaved round by round, for decode
// rows and prefill chunks, over an f32 or a half cache (the engine's
// default is f16: K/V and the LR rows alike). Prints medians and each
// against plain.
//
// Usage: bench_lora_attention [--threads 1,2] [--reps N] [--rank R] [--kv-dtype f32,f16]
//                             [--scenarios decode@512,...]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/kv_convert.h"
#include "util/stats.h"

using namespace agentkv;

namespace {

struct Scenario {
  std::string name;
  std::string key;  // its name for --scenarios
  int32_t kv_len;
  std::vector<int32_t> rows;  // query positions (one sequence)
};

std::vector<int32_t> iota_from(int32_t from, int32_t n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads = {1, 2};
  int reps = 9;
  int32_t rank = 8;
  CLI::App app{
      "Flash-LoRA-Attention against plain attention and attention over expanded V, on one "
      "SmolLM2-135M layer (docs/benchmarks.md, \"Flash-LoRA-Attention\")"};
  app.add_option("--threads", threads, "thread counts, comma-separated")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--reps", reps, "interleaved rounds (medians)")->check(CLI::PositiveNumber);
  app.add_option("--rank", rank, "LoRA rank r")->check(CLI::Range(1, 256));
  std::vector<std::string> dtypes = {"f32", "f16"};
  app.add_option("--kv-dtype", dtypes,
                 "KV cache (and LR cache) element types, comma-separated: f32, f16, bf16")
      ->delimiter(',')
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  std::vector<std::string> only;
  app.add_option("--scenarios", only,
                 "run only these scenarios, comma-separated: decode@512, decode@2048, decode@8192, "
                 "chunk8, chunk32, chunk128, chunk512 (default: all)")
      ->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  const int32_t n_heads = 9, kv_heads = 3, D = 64, bs = 16, max_len = 8192;
  std::vector<Scenario> scenarios = {
      {"decode @512", "decode@512", 512, {511}},
      {"decode @2048", "decode@2048", 2048, {2047}},
      {"decode @8192", "decode@8192", 8192, {8191}},
      {"chunk 8 @2048", "chunk8", 2048, iota_from(2040, 8)},
      {"chunk 32 @2048", "chunk32", 2048, iota_from(2016, 32)},
      {"chunk 128 @2048", "chunk128", 2048, iota_from(1920, 128)},
      {"chunk 512 @2048", "chunk512", 2048, iota_from(1536, 512)},
  };
  if (!only.empty()) {
    std::vector<Scenario> kept;
    for (const std::string& o : only) {
      auto it =
          std::find_if(scenarios.begin(), scenarios.end(), [&](const Scenario& s) { return s.key == o; });
      if (it == scenarios.end()) {
        std::fprintf(stderr, "bench_lora_attention: unknown scenario '%s' (see --help)\n", o.c_str());
        return 2;
      }
      kept.push_back(*it);
    }
    scenarios = kept;
  }
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int32_t n_blocks = max_len / bs;
  const int64_t stride = int64_t(bs) * kv_heads * D, lr_stride = int64_t(bs) * rank;
  std::vector<float> k(stride * n_blocks), v(stride * n_blocks), lr(lr_stride * n_blocks),
      b(size_t(kv_heads) * D * rank);
  for (auto* buf : {&k, &v, &lr, &b})
    for (auto& x : *buf) x = dist(rng);
  std::vector<int32_t> block_ids(n_blocks), lr_ids(n_blocks);
  std::iota(block_ids.begin(), block_ids.end(), 0);
  std::iota(lr_ids.begin(), lr_ids.end(), 0);
  std::shuffle(block_ids.begin(), block_ids.end(), rng);
  std::shuffle(lr_ids.begin(), lr_ids.end(), rng);
  // The same values rounded to a half type, for the half caches, as the engine writes them.
  auto half = [](const std::vector<float>& x, KvDType t) {
    std::vector<uint16_t> h(x.size());
    cpu::kv_from_f32(t, x.data(), h.data(), int64_t(x.size()));
    return h;
  };

  std::printf("rank %d, SmolLM2-135M layer (9/3 heads, head_dim 64), medians of %d interleaved rounds\n\n",
              rank, reps);
  std::printf(
      "| scenario | kv | threads | plain ms | flash-lora ms | expand V ms | auto ms | flash-lora / plain | "
      "expand / plain | flash-lora / expand |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const std::string& dtype_name : dtypes) {
    const KvDType dtype = *kv_dtype_parse(dtype_name);
    std::vector<uint16_t> k16, v16, lr16;
    if (dtype != KvDType::kF32) k16 = half(k, dtype), v16 = half(v, dtype), lr16 = half(lr, dtype);
    void* kp = dtype == KvDType::kF32 ? static_cast<void*>(k.data()) : k16.data();
    void* vp = dtype == KvDType::kF32 ? static_cast<void*>(v.data()) : v16.data();
    const void* lrp = dtype == KvDType::kF32 ? static_cast<const void*>(lr.data()) : lr16.data();
    KvLayerView kv{kp, vp, stride, bs, kv_heads, D, dtype};
    for (const auto& sc : scenarios) {
      const int32_t n_rows = int32_t(sc.rows.size());
      std::vector<float> q(size_t(n_rows) * n_heads * D), out(q.size());
      for (auto& x : q) x = dist(rng);
      std::vector<int32_t> row_indptr = {0, n_rows}, block_indptr = {0, (sc.kv_len + bs - 1) / bs};
      const float* b_ptr = b.data();
      const float scale = 2.0f;
      for (int t : threads) {
        auto be = backend_cpu_init({.n_threads = t});
        std::vector<double> ms[4];
        for (int r = 0; r < reps + 1; ++r) {
          for (int variant = 0; variant < 4; ++variant) {
            AttentionPlan plan{1, row_indptr.data(), sc.rows.data(), block_indptr.data(), block_ids.data()};
            LrAttention lp{lrp, lr_stride, rank, block_indptr.data(), lr_ids.data(), &b_ptr, &rank, &scale};
            lp.dtype = dtype;
            lp.path = variant == 1   ? LrAttention::Path::kFused
                      : variant == 2 ? LrAttention::Path::kExpand
                                     : LrAttention::Path::kAuto;
            if (variant > 0) plan.lr = &lp;
            const int inner = n_rows == 1 ? 100 : 1;
            const auto t0 = std::chrono::steady_clock::now();
            for (int j = 0; j < inner; ++j)
              be->attention(plan, q.data(), n_heads, kv, 1.0f / std::sqrt(float(D)), out.data());
            const double dt =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / inner;
            if (r > 0) ms[variant].push_back(dt * 1e3);  // round 0 warms up
          }
        }
        const double m0 = median(ms[0]), m1 = median(ms[1]), m2 = median(ms[2]), m3 = median(ms[3]);
        std::printf("| %s | %s | %d | %.4f | %.4f | %.4f | %.4f | %.2fx | %.2fx | %.2fx |\n", sc.name.c_str(),
                    dtype_name.c_str(), t, m0, m1, m2, m3, m1 / m0, m2 / m0, m1 / m2);
      }
    }
  }
  return 0;
}
