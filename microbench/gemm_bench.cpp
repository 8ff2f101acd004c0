// GEMM shapes of the SmolLM2-135M forward, y[m, n] = x[m, k] · w[n, k]^T,
// timed for every implementation the CPU backend could use. Variants run
// interleaved (one sample of each in turn) so drift on a shared machine hits
// all of them alike; the table shows medians in microseconds.
//
//   lib:  the library's own threads (openblas_set_num_threads / OpenMP)
//   pool: the library single-threaded, agentkv's ThreadPool splitting n
//   gemv: the hand-written single-row kernel on the ThreadPool (m == 1 only)
//
// Weights rotate over copies totalling > 64 MiB so each call streams w from
// memory as a real forward does (30 layers of weights do not fit in L3).
//
// Usage: bench_gemm [--threads 1,2] [--m 1,16,128,512,2048] [--max-seconds S]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
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

#include "backend/cpu/dot_tile.h"
#include "backend/cpu/gemm.h"
#include "util/stats.h"
#include "util/thread_pool.h"

using namespace agentkv;
using namespace agentkv::cpu;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Variant {
  std::string name;
  std::function<void(const float*, const float*, float*)> run;
  std::vector<double> samples_us;
  std::vector<double> cpu_us;
};

// CPU time of the calling thread. With one thread all the work runs there, and
// unlike wall time it does not grow while the thread waits for a core on a
// shared machine.
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

// Splits n over the pool in chunks that are multiples of 16 columns.
void pool_split(ThreadPool& pool, int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  int t = pool.size();
  int64_t chunk = ((n + t - 1) / t + 15) / 16 * 16;
  pool.parallel_for(t, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      int64_t n0 = std::min(n, i * chunk), n1 = std::min(n, n0 + chunk);
      if (n0 < n1) fn(n0, n1);
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads = {1, 2};
  std::vector<int> ms = {1, 16, 128, 512, 2048};
  double max_seconds = 1.5;  // per (shape, threads) cell
  CLI::App app{
      "OpenBLAS against oneDNN against the hand-written GEMV on the SmolLM2-135M shapes, interleaved "
      "(docs/benchmarks.md, \"GEMM library choice\")"};
  app.add_option("--threads", threads, "thread counts, comma-separated")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--m", ms, "row counts m, comma-separated")->delimiter(',')->check(CLI::PositiveNumber);
  app.add_option("--max-seconds", max_seconds, "time per (shape, threads) cell")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  const std::vector<std::pair<int, int>> kns = {
      {576, 576}, {576, 192}, {576, 1536}, {1536, 576}, {576, 49152}};

  // (m, k, n, threads, variant) -> (median wall us, median CPU us)
  std::map<std::tuple<int, int, int, int, std::string>, std::pair<double, double>> results;
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::printf("load average at start: %s\n\n", loadavg().c_str());
  std::printf("| m | k | n | threads | variant | median us | GFLOP/s | vs best | CPU us (1 thread) |\n");
  std::printf("|---:|---:|---:|---:|---|---:|---:|---:|---:|\n");
  for (auto [k, n] : kns) {
    int64_t wsize = int64_t(k) * n;
    int copies = int(std::max<int64_t>(1, (int64_t(64) << 20) / (wsize * 4)));
    std::vector<float> w(wsize * copies);
    for (auto& v : w) v = dist(rng);
    for (int m : ms) {
      std::vector<float> x(int64_t(m) * k);
      for (auto& v : x) v = dist(rng);
      for (int t : threads) {
        ThreadPool pool(t);
        std::vector<Variant> vars;
        vars.push_back({"openblas lib",
                        [&](const float* xp, const float* wp, float* yp) {
                          gemm_threads_openblas(t);
                          sgemm_nt_openblas(xp, wp, yp, m, n, k, n, 0.0f);
                        },
                        {},
                        {}});
        vars.push_back({"dnnl lib",
                        [&](const float* xp, const float* wp, float* yp) {
                          gemm_threads_dnnl(t);
                          sgemm_nt_dnnl(xp, wp, yp, m, n, k, n, 0.0f);
                        },
                        {},
                        {}});
        if (t > 1) {
          vars.push_back({"openblas pool",
                          [&](const float* xp, const float* wp, float* yp) {
                            gemm_threads_openblas(1);
                            pool_split(pool, n, [&](int64_t n0, int64_t n1) {
                              sgemm_nt_openblas(xp, wp + n0 * k, yp + n0, m, n1 - n0, k, n, 0.0f);
                            });
                          },
                          {},
                          {}});
          vars.push_back({"dnnl pool",
                          [&](const float* xp, const float* wp, float* yp) {
                            pool_split(pool, n, [&](int64_t n0, int64_t n1) {
                              gemm_threads_dnnl(1);
                              sgemm_nt_dnnl(xp, wp + n0 * k, yp + n0, m, n1 - n0, k, n, 0.0f);
                            });
                          },
                          {},
                          {}});
        }
        if (m <= 8) {
          vars.push_back({"gemv pool",
                          [&](const float* xp, const float* wp, float* yp) {
                            pool_split(pool, n, [&](int64_t n0, int64_t n1) {
                              dot_rows_f32(xp, k, wp, k, k, yp, n, m, n0, n1, false);
                            });
                          },
                          {},
                          {}});
        }
        std::vector<std::vector<float>> ys(vars.size(), std::vector<float>(int64_t(m) * n));
        // Calibrate: one warm call each, then pick inner repetitions so one
        // sample is >= 20 ms and the rounds fit max_seconds.
        int copy = 0;
        double slowest = 0;
        for (size_t v = 0; v < vars.size(); ++v) {
          vars[v].run(x.data(), w.data(), ys[v].data());
          double t0 = now_s();
          vars[v].run(x.data(), w.data(), ys[v].data());
          slowest = std::max(slowest, now_s() - t0);
        }
        int inner = std::max(1, int(0.02 / std::max(slowest, 1e-7)));
        int rounds = std::clamp(int(max_seconds / (slowest * inner * vars.size())), 3, 15);
        for (int r = 0; r < rounds; ++r) {
          for (auto& var : vars) {
            double t0 = now_s(), c0 = thread_cpu_s();
            for (int i = 0; i < inner; ++i) {
              var.run(x.data(), w.data() + wsize * copy, ys[&var - vars.data()].data());
              copy = (copy + 1) % copies;
            }
            var.samples_us.push_back((now_s() - t0) / inner * 1e6);
            var.cpu_us.push_back((thread_cpu_s() - c0) / inner * 1e6);
          }
        }
        // Every variant computes the same product; say so if one does not.
        for (size_t v = 0; v < vars.size(); ++v) vars[v].run(x.data(), w.data(), ys[v].data());
        for (size_t v = 1; v < vars.size(); ++v) {
          double maxd = 0;
          for (size_t i = 0; i < ys[0].size(); ++i)
            maxd = std::max(maxd, double(std::fabs(ys[v][i] - ys[0][i])));
          if (maxd > 1e-3)
            std::fprintf(stderr, "MISMATCH %s vs %s: %g\n", vars[v].name.c_str(), vars[0].name.c_str(), maxd);
        }
        double best = 1e30;
        for (auto& var : vars) best = std::min(best, median(var.samples_us));
        for (auto& var : vars) {
          double med = median(var.samples_us);
          results[{m, k, n, t, var.name}] = {med, median(var.cpu_us)};
          char cpu[32] = "-";
          if (t == 1) std::snprintf(cpu, sizeof cpu, "%.1f", median(var.cpu_us));
          std::printf("| %d | %d | %d | %d | %s | %.1f | %.1f | %.2f | %s |\n", m, k, n, t, var.name.c_str(),
                      med, 2.0 * m * k * n / med * 1e-3, med / best, cpu);
        }
        std::fflush(stdout);
      }
    }
  }
  std::printf("\nload average at end: %s\n", loadavg().c_str());

  // Summary: one line per shape. 1 thread compares CPU time (robust on a
  // shared machine); 2 threads can only be wall time.
  auto get = [&](int m, int k, int n, int t, const char* v, bool cpu) -> std::string {
    auto it = results.find({m, k, n, t, v});
    if (it == results.end()) return "-";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", cpu ? it->second.second : it->second.first);
    return buf;
  };
  const int t2 = threads.size() > 1 ? threads[1] : threads[0];
  std::printf("\nSummary (us). 1 thread: CPU time of the calling thread; %d threads: wall time.\n\n", t2);
  std::printf(
      "| m | k | n | openblas 1t | dnnl 1t | gemv 1t | openblas lib %dt | dnnl lib %dt | openblas pool %dt "
      "| dnnl pool %dt | gemv pool %dt |\n",
      t2, t2, t2, t2, t2);
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (auto [k, n] : kns)
    for (int m : ms)
      std::printf("| %d | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", m, k, n,
                  get(m, k, n, threads[0], "openblas lib", true).c_str(),
                  get(m, k, n, threads[0], "dnnl lib", true).c_str(),
                  get(m, k, n, threads[0], "gemv pool", true).c_str(),
                  get(m, k, n, t2, "openblas lib", false).c_str(),
                  get(m, k, n, t2, "dnnl lib", false).c_str(),
                  get(m, k, n, t2, "openblas pool", false).c_str(),
                  get(m, k, n, t2, "dnnl pool", false).c_str(), get(m, k, n, t2, "gemv pool", false).c_str());
  return 0;
}
