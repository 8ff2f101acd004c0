// Decode products (m = 1, q8 activations) on the weight types of real K-quant
// files, at Qwen2.5-Coder-1.5B's shapes, each timed twice: on one small matrix
// that stays in L2 (what the kernel computes at most) and streamed from
// memory over copies larger than the L3 (what a decode step gets). The two
// side by side say whether a type's decode is bound by compute or by memory
// (issue 55). Each is run on the file's blocks and on the layout laid out
// at load (--prepack-weights: q4_K's and q6_K's decode records), GB/s of
// the file's bytes; variants interleaved, medians of the rounds.
//
// Usage: bench_decode_q8 [--threads 1,2] [--types q4_K,q6_K,...] [--max-seconds S]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "util/stats.h"

using namespace agentkv;

namespace {

struct Type {
  const char* name;
  uint32_t id;    // ggml type id
  int bytes;      // per block
  int elems;      // per block
  int d_off;      // byte offset of the f16 scale
  int dmin_off;   // of the f16 minimum, or -1
};
constexpr Type kTypes[] = {
    {"q4_0", 2, 18, 32, 0, -1}, {"q5_0", 6, 22, 32, 0, -1},    {"q8_0", 8, 34, 32, 0, -1},
    {"q4_K", 12, 144, 256, 0, 2}, {"q5_K", 13, 176, 256, 0, 2}, {"q6_K", 14, 210, 256, 208, -1},
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

// Random blocks with well-scaled f16 scales; every other byte random.
// On huge pages where the kernel gives them, as the engine's weights are
// (util/huge_pages.h).
WeightBytes random_blocks(std::mt19937& rng, const Type& t, int64_t n_blocks) {
  WeightBytes d(size_t(n_blocks * t.bytes));
  for (auto& b : d) b = static_cast<uint8_t>(rng());
  auto scale = [&](uint8_t* p) {
    const uint16_t h = static_cast<uint16_t>(((8 + rng() % 4) << 10) | (rng() & 0x3ffu));
    std::memcpy(p, &h, 2);
  };
  for (int64_t i = 0; i < n_blocks; ++i) {
    scale(&d[size_t(i * t.bytes + t.d_off)]);
    if (t.dmin_off >= 0) scale(&d[size_t(i * t.bytes + t.dmin_off)]);
  }
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads = {1, 2};
  std::vector<std::string> types = {"q4_K", "q6_K", "q5_0", "q8_0"};
  double max_seconds = 1.0;
  // (k, n): Qwen2.5-Coder-1.5B's gate/up, down and output matrix by default;
  // the L2 case is 256 rows of the same k.
  std::vector<std::string> shape_args = {"1536x8960", "8960x1536", "1536x151936"};
  CLI::App app{
      "Decode products (m = 1, q8 activations) per weight type, in L2 and streamed from memory "
      "(docs/benchmarks.md, issue 55)"};
  app.add_option("--threads", threads, "thread counts, comma-separated")->delimiter(',')->check(CLI::PositiveNumber);
  app.add_option("--types", types, "weight types, comma-separated (q4_0 q5_0 q8_0 q4_K q5_K q6_K)")->delimiter(',');
  app.add_option("--max-seconds", max_seconds, "time per cell")->check(CLI::PositiveNumber);
  app.add_option("--shapes", shape_args,
                 "KxN per product, comma-separated (default Qwen2.5-Coder-1.5B's; Gemma 3 270M's output: 640x262144)")
      ->delimiter(',');
  CLI11_PARSE(app, argc, argv);

  std::vector<std::pair<int, int>> shapes;
  for (const std::string& a : shape_args) {
    int k = 0, n = 0;
    if (std::sscanf(a.c_str(), "%dx%d", &k, &n) != 2 || k <= 0 || n <= 0 || k % 32 != 0) {
      std::fprintf(stderr, "bench_decode_q8: --shapes %s: want KxN with K a positive multiple of 32\n", a.c_str());
      return 2;
    }
    shapes.emplace_back(k, n);
  }
  std::mt19937 rng(42);
  std::printf("m = 1, q8 activations; load average at start: %s\n\n", loadavg().c_str());
  std::printf("| type | k | n | threads | file blocks, L2 | file blocks, memory | laid out at load, L2 | laid out, memory |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const std::string& tn : types) {
    const Type* t = nullptr;
    for (const Type& c : kTypes)
      if (tn == c.name) t = &c;
    if (t == nullptr) {
      std::fprintf(stderr, "bench_decode_q8: unknown type '%s' (q4_0 q5_0 q8_0 q4_K q5_K q6_K)\n", tn.c_str());
      return 2;
    }
    for (auto [k, n] : shapes) {
      if (k % t->elems != 0) continue;  // a K type's 256-weight blocks do not tile this k
      const int64_t rb = int64_t(k) / t->elems * t->bytes;
      const int64_t small_n = 256;
      // Streamed: copies of the matrix totalling at least 256 MiB.
      const int copies = int(std::max<int64_t>(2, ((int64_t(256) << 20) + rb * n - 1) / (rb * n)));
      const auto small = random_blocks(rng, *t, small_n * (k / t->elems));
      const auto big = random_blocks(rng, *t, int64_t(copies) * n * (k / t->elems));
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      std::vector<float> x(static_cast<size_t>(k)), y(static_cast<size_t>(n));
      for (auto& v : x) v = dist(rng);
      for (int th : threads) {
        auto be = backend_cpu_init({.n_threads = th, .act_quant = ActQuant::kQ8, .prepack_weights = true});
        // The layouts laid out at load (prepare_weights), where the type has one.
        const QuantMatrix small_m{t->id, small.data(), rb, small_n, k};
        const PreparedWeights small_laid = be->prepare_weights(small_m);
        std::vector<PreparedWeights> big_laid;
        for (int c = 0; c < copies; ++c)
          big_laid.push_back(be->prepare_weights(QuantMatrix{t->id, big.data() + size_t(c) * rb * n, rb, n, k}));
        const bool has_layout = small_laid.layout != nullptr;
        std::vector<double> gbs[2][2];  // [layout][memory]
        int copy = 0;
        const double t_end = now_s() + max_seconds;
        for (int round = 0; round < 5 || (now_s() < t_end && round < 200); ++round) {
          for (int lay = 0; lay < (has_layout ? 2 : 1); ++lay) {
            // L2: the small matrix, repeated to about as many bytes as one big call.
            QuantMatrix sm = small_m;
            sm.layout = lay ? small_laid.layout.get() : nullptr;
            const int reps = int(std::max<int64_t>(1, n / small_n));
            double t0 = now_s();
            for (int i = 0; i < reps; ++i) be->matmul_quant(x.data(), sm, y.data(), 1);
            gbs[lay][0].push_back(double(reps) * rb * small_n / (now_s() - t0) * 1e-9);
            QuantMatrix bm{t->id, big.data() + size_t(copy) * rb * n, rb, n, k};
            bm.layout = lay ? big_laid[size_t(copy)].layout.get() : nullptr;
            t0 = now_s();
            be->matmul_quant(x.data(), bm, y.data(), 1);
            gbs[lay][1].push_back(double(rb) * n / (now_s() - t0) * 1e-9);
          }
          copy = (copy + 1) % copies;
        }
        auto cell = [&](int lay, int mem) {
          return gbs[lay][mem].empty() ? std::string("-") : std::to_string(median(gbs[lay][mem])).substr(0, 5);
        };
        std::printf("| %s | %d | %d | %d | %s | %s | %s | %s |\n", t->name, k, n, th, cell(0, 0).c_str(),
                    cell(0, 1).c_str(), cell(1, 0).c_str(), cell(1, 1).c_str());
        std::fflush(stdout);
      }
    }
  }
  std::printf("\nload average at end: %s\n", loadavg().c_str());
  return 0;
}
