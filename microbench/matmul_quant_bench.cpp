// Decode-step (m = 1 by default) products of SmolLM2-135M, through the CPU
// backend: f32 matmul on unpacked weights vs matmul_quant on q4_0, q4_1 and
// q8_0 blocks, with f32 activations and with --act-quant q8 ("+q8"). Variants run interleaved (one sample of
// each in turn) so drift on a shared machine hits all alike; the table shows medians in microseconds.
//
// Weights rotate over copies totalling > 64 MiB per variant so each call
// streams w from memory, as a forward over 30 layers does.
//
// The per-token line sums one forward's products: 30 layers of q, k, v, o,
// gate, up, down plus the tied output matrix, with the default GGUF's types
// (q4_1 layers, q8_0 output) against all-f32.
//
// --pairs instead times matmul_quant_pair (k/v, gate/up) against two
// matmul_quant calls.
//
// Usage: bench_matmul_quant [--threads 1,2] [--m 1] [--max-seconds S] [--pairs]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "util/stats.h"

using namespace agentkv;

namespace {

constexpr uint32_t kQ4_0 = 2, kQ4_1 = 3, kQ8_0 = 8;  // ggml type ids

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU time of the calling thread: with one thread it is robust against
// waiting for a core on a shared machine.
double thread_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

// Random blocks with well-scaled f16 scales (and q4_1 mins) at the front of
// each block; the quant bytes are random.
std::vector<uint8_t> random_blocks(std::mt19937& rng, uint32_t type, int64_t n_blocks) {
  const int bytes = type == kQ4_1 ? 20 : type == kQ4_0 ? 18 : 34, n_scales = type == kQ4_1 ? 2 : 1;
  std::vector<uint8_t> d(n_blocks * bytes);
  for (auto& b : d) b = static_cast<uint8_t>(rng());
  for (int64_t i = 0; i < n_blocks; ++i)
    for (int s = 0; s < n_scales; ++s) {
      const uint16_t h =
          static_cast<uint16_t>(((rng() & 1u) << 15) | ((8 + rng() % 4) << 10) | (rng() & 0x3ffu));
      std::memcpy(&d[i * bytes + 2 * s], &h, 2);
    }
  return d;
}

struct Variant {
  std::string name;
  int64_t bytes_per_call;  // weight bytes one call reads
  int copies;
  std::function<void(int copy)> run;
  std::vector<double> wall_us, cpu_us;
};

// Times each variant in interleaved rounds (one sample of each in turn, so
// drift on a shared machine hits all alike): inner repetitions make one
// sample >= 20 ms, and the rounds fill about max_seconds, within
// [min_rounds, max_rounds]. Wall and calling-thread CPU microseconds per call.
void sample_interleaved(std::vector<Variant>& vars, double max_seconds, int min_rounds, int max_rounds) {
  double slowest = 0;
  for (auto& v : vars) {
    v.run(0);
    const double t0 = now_s();
    v.run(1);
    slowest = std::max(slowest, now_s() - t0);
  }
  const int inner = std::max(1, int(0.02 / std::max(slowest, 1e-7)));
  const int rounds = std::clamp(int(max_seconds / (slowest * inner * vars.size())), min_rounds, max_rounds);
  std::vector<int> copy(vars.size(), 0);
  for (int r = 0; r < rounds; ++r)
    for (size_t vi = 0; vi < vars.size(); ++vi) {
      Variant& v = vars[vi];
      const double t0 = now_s(), c0 = thread_cpu_s();
      for (int i = 0; i < inner; ++i) {
        v.run(copy[vi]);
        copy[vi] = (copy[vi] + 1) % v.copies;
      }
      v.wall_us.push_back((now_s() - t0) / inner * 1e6);
      v.cpu_us.push_back((thread_cpu_s() - c0) / inner * 1e6);
    }
}

// --pairs: the two products of one input that a forward runs together (k/v,
// gate/up) as one matmul_quant_pair call against two matmul_quant calls,
// on q4_1 (SmolLM2's layers) with f32 and with q8 activations, interleaved.
// The pair saves one fork-join and, under q8, one quantization of x.
int run_pairs(const std::vector<int>& threads, int m, double max_seconds) {
  const std::vector<std::tuple<const char*, int, int>> shapes = {{"k/v", 576, 192}, {"gate/up", 576, 1536}};
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-0.1f, 0.1f);
  std::printf("m = %d, load average at start: %s\n\n", m, loadavg().c_str());
  std::printf("| pair | k | n each | threads | activations | two calls us | pair us | pair / two calls |\n");
  std::printf("|---|---:|---:|---:|---|---:|---:|---:|\n");
  for (auto [name, k, n] : shapes) {
    const int64_t rb = k / 32 * 20;
    const int copies = int(std::max<int64_t>(2, (int64_t(64) << 20) / (2 * rb * n)));
    const auto wa = random_blocks(rng, kQ4_1, int64_t(copies) * n * (k / 32));
    const auto wb = random_blocks(rng, kQ4_1, int64_t(copies) * n * (k / 32));
    std::vector<float> x(int64_t(m) * k), ya(int64_t(m) * n), yb(ya.size());
    for (auto& v : x) v = dist(rng);
    for (int t : threads)
      for (ActQuant aq : {ActQuant::kF32, ActQuant::kQ8}) {
        auto be = backend_cpu_init({.n_threads = t, .act_quant = aq});
        auto mat = [&](const std::vector<uint8_t>& w, int c) {
          return QuantMatrix{kQ4_1, w.data() + rb * n * c, rb, n, k};
        };
        std::vector<Variant> vars = {
            {"two calls",
             2 * rb * n,
             copies,
             [&](int c) {
               be->matmul_quant(x.data(), mat(wa, c), ya.data(), m);
               be->matmul_quant(x.data(), mat(wb, c), yb.data(), m);
             },
             {},
             {}},
            {"pair",
             2 * rb * n,
             copies,
             [&](int c) { be->matmul_quant_pair(x.data(), mat(wa, c), ya.data(), mat(wb, c), yb.data(), m); },
             {},
             {}},
        };
        sample_interleaved(vars, max_seconds, 9, 41);
        const double two = median(vars[0].wall_us), pair = median(vars[1].wall_us);
        std::printf("| %s | %d | %d | %d | %s | %.1f | %.1f | %.3f |\n", name, k, n, t,
                    aq == ActQuant::kQ8 ? "q8" : "f32", two, pair, pair / two);
        std::fflush(stdout);
      }
  }
  std::printf("\nload average at end: %s\n", loadavg().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads = {1, 2};
  int m = 1;
  double max_seconds = 1.5;  // per (shape, threads) cell
  CLI::App app{
      "matmul_quant on packed q4_0 / q4_1 / q8_0 blocks (f32 or q8 activations) against the f32 matmul "
      "at decode shapes "
      "(docs/benchmarks.md, \"Decode matmul on packed GGUF blocks\")"};
  app.add_option("--threads", threads, "thread counts, comma-separated")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--m", m, "rows m")->check(CLI::PositiveNumber);
  app.add_option("--max-seconds", max_seconds, "time per (shape, threads) cell")->check(CLI::PositiveNumber);
  bool pairs = false;
  app.add_flag("--pairs", pairs,
               "instead: matmul_quant_pair against two matmul_quant calls, on the k/v and gate/up shapes");
  CLI11_PARSE(app, argc, argv);
  if (pairs) return run_pairs(threads, m, max_seconds);
  // (k, n) and how many of each one forward runs.
  const std::vector<std::tuple<int, int, int>> shapes = {
      {576, 576, 60}, {576, 192, 60}, {576, 1536, 60}, {1536, 576, 30}, {576, 49152, 1}};
  const char* kNames[] = {"f32", "q4_1", "q8_0"};

  std::map<std::tuple<int, int, int, std::string>, std::pair<double, double>> res;  // wall, cpu
  std::mt19937 rng(42);
  std::printf("m = %d, load average at start: %s\n\n", m, loadavg().c_str());
  std::printf("| k | n | threads | variant | median us | CPU us (1 thread) | GB/s of weights | vs f32 |\n");
  std::printf("|---:|---:|---:|---|---:|---:|---:|---:|\n");
  for (auto [k, n, count] : shapes) {
    (void)count;
    const int64_t elems = int64_t(k) * n;
    auto copies_for = [&](int64_t bytes) { return int(std::max<int64_t>(2, (int64_t(64) << 20) / bytes)); };
    // Weights: f32, and packed q4_1 / q8_0, each in enough copies.
    const int cf = copies_for(elems * 4);
    std::vector<float> wf(elems * cf);
    std::uniform_real_distribution<float> dist(-0.1f, 0.1f);
    for (auto& v : wf) v = dist(rng);
    const int64_t rb40 = k / 32 * 18, rb41 = k / 32 * 20, rb80 = k / 32 * 34;
    const int c40 = copies_for(rb40 * n), c41 = copies_for(rb41 * n), c80 = copies_for(rb80 * n);
    const auto w40 = random_blocks(rng, kQ4_0, int64_t(c40) * n * (k / 32));
    const auto w41 = random_blocks(rng, kQ4_1, int64_t(c41) * n * (k / 32));
    const auto w80 = random_blocks(rng, kQ8_0, int64_t(c80) * n * (k / 32));
    std::vector<float> x(int64_t(m) * k);
    for (auto& v : x) v = dist(rng);
    std::vector<float> y(int64_t(m) * n);

    for (int t : threads) {
      auto be = backend_cpu_init({.n_threads = t});
      auto be8 = backend_cpu_init({.n_threads = t, .act_quant = ActQuant::kQ8});
      auto quant = [&](backend_i* b, uint32_t type, const std::vector<uint8_t>& w, int64_t rb, int c) {
        b->matmul_quant(x.data(), QuantMatrix{type, w.data() + rb * n * c, rb, n, k}, y.data(), m);
      };
      std::vector<Variant> vars = {
          {"f32",
           elems * 4,
           cf,
           [&](int c) { be->matmul(x.data(), wf.data() + elems * c, y.data(), m, k, n); },
           {},
           {}},
          {"q4_1",
           rb41 * n,
           c41,
           [&](int c) {
             be->matmul_quant(x.data(), QuantMatrix{kQ4_1, w41.data() + rb41 * n * c, rb41, n, k}, y.data(),
                              m);
           },
           {},
           {}},
          {"q8_0",
           rb80 * n,
           c80,
           [&](int c) {
             be->matmul_quant(x.data(), QuantMatrix{kQ8_0, w80.data() + rb80 * n * c, rb80, n, k}, y.data(),
                              m);
           },
           {},
           {}},
          {"q4_0", rb40 * n, c40, [&](int c) { quant(be.get(), kQ4_0, w40, rb40, c); }, {}, {}},
          {"q4_0+q8", rb40 * n, c40, [&](int c) { quant(be8.get(), kQ4_0, w40, rb40, c); }, {}, {}},
          {"q4_1+q8", rb41 * n, c41, [&](int c) { quant(be8.get(), kQ4_1, w41, rb41, c); }, {}, {}},
          {"q8_0+q8", rb80 * n, c80, [&](int c) { quant(be8.get(), kQ8_0, w80, rb80, c); }, {}, {}},
      };
      sample_interleaved(vars, max_seconds, 5, 25);
      const double f32_med = median(vars[0].wall_us);
      for (auto& v : vars) {
        const double med = median(v.wall_us), cpu = median(v.cpu_us);
        res[{k, n, t, v.name}] = {med, cpu};
        char cpu_s[32] = "-";
        if (t == 1) std::snprintf(cpu_s, sizeof cpu_s, "%.1f", cpu);
        std::printf("| %d | %d | %d | %s | %.1f | %s | %.1f | %.2f |\n", k, n, t, v.name.c_str(), med, cpu_s,
                    v.bytes_per_call / med * 1e-3, med / f32_med);
      }
      std::fflush(stdout);
    }
  }
  std::printf("\nload average at end: %s\n\n", loadavg().c_str());

  // One forward's products: every shape times its count. With one thread the
  // CPU time of the calling thread is also summed: it does not grow while the
  // thread waits for a core on a shared machine.
  std::printf("Per token (m = %d): median time x count per forward, summed, ms:\n\n", m);
  std::printf(
      "| threads | time | all f32 | q4_1 layers + q8_0 output | all q8_0 | speed-up (default GGUF) | "
      "default GGUF, q8 activations | q4_0 layers + q8_0 output, q8 activations |\n");
  std::printf("|---:|---|---:|---:|---:|---:|---:|---:|\n");
  for (int t : threads)
    for (bool cpu : {false, true}) {
      if (cpu && t != 1) continue;
      double f32 = 0, dflt = 0, q8 = 0, dflt_q8 = 0, q40_q8 = 0;
      for (auto [k, n, count] : shapes) {
        auto get = [&](const char* v) {
          const auto& r = res[{k, n, t, v}];
          return cpu ? r.second : r.first;
        };
        f32 += count * get(kNames[0]);
        dflt += count * get(n == 49152 ? kNames[2] : kNames[1]);  // the output matrix is q8_0
        q8 += count * get(kNames[2]);
        dflt_q8 += count * get(n == 49152 ? "q8_0+q8" : "q4_1+q8");
        q40_q8 += count * get(n == 49152 ? "q8_0+q8" : "q4_0+q8");
      }
      std::printf("| %d | %s | %.2f | %.2f | %.2f | %.2fx | %.2f | %.2f |\n", t, cpu ? "CPU" : "wall",
                  f32 * 1e-3, dflt * 1e-3, q8 * 1e-3, f32 / dflt, dflt_q8 * 1e-3, q40_q8 * 1e-3);
    }
  return 0;
}
