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
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/gemm.h"
#include "util/thread_pool.h"

using namespace agentkv;
using namespace agentkv::cpu;

namespace {

std::vector<int> parse_list(const char* s) {
  std::vector<int> out;
  while (*s) {
    out.push_back(std::atoi(s));
    while (*s && *s != ',') ++s;
    if (*s == ',') ++s;
  }
  return out;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Variant {
  std::string name;
  std::function<void(const float*, const float*, float*)> run;
  std::vector<double> samples_us;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) threads = parse_list(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--m")) ms = parse_list(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--max-seconds")) max_seconds = std::atof(argv[i + 1]);
  }
  const std::vector<std::pair<int, int>> kns = {{576, 576}, {576, 192}, {576, 1536}, {1536, 576}, {576, 49152}};

  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::printf("| m | k | n | threads | variant | median us | GFLOP/s | vs best |\n");
  std::printf("|---:|---:|---:|---:|---|---:|---:|---:|\n");
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
        vars.push_back({"openblas lib", [&](const float* xp, const float* wp, float* yp) {
                          gemm_threads_openblas(t);
                          sgemm_nt_openblas(xp, wp, yp, m, n, k, n, 0.0f);
                        }, {}});
        vars.push_back({"dnnl lib", [&](const float* xp, const float* wp, float* yp) {
                          gemm_threads_dnnl(t);
                          sgemm_nt_dnnl(xp, wp, yp, m, n, k, n, 0.0f);
                        }, {}});
        if (t > 1) {
          vars.push_back({"openblas pool", [&](const float* xp, const float* wp, float* yp) {
                            gemm_threads_openblas(1);
                            pool_split(pool, n, [&](int64_t n0, int64_t n1) {
                              sgemm_nt_openblas(xp, wp + n0 * k, yp + n0, m, n1 - n0, k, n, 0.0f);
                            });
                          }, {}});
          vars.push_back({"dnnl pool", [&](const float* xp, const float* wp, float* yp) {
                            pool_split(pool, n, [&](int64_t n0, int64_t n1) {
                              gemm_threads_dnnl(1);
                              sgemm_nt_dnnl(xp, wp + n0 * k, yp + n0, m, n1 - n0, k, n, 0.0f);
                            });
                          }, {}});
        }
        if (m == 1) {
          vars.push_back({"gemv pool", [&](const float* xp, const float* wp, float* yp) {
                            pool_split(pool, n, [&](int64_t n0, int64_t n1) { gemv_nt(xp, wp, yp, k, n0, n1, false); });
                          }, {}});
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
            double t0 = now_s();
            for (int i = 0; i < inner; ++i) {
              var.run(x.data(), w.data() + wsize * copy, ys[&var - vars.data()].data());
              copy = (copy + 1) % copies;
            }
            var.samples_us.push_back((now_s() - t0) / inner * 1e6);
          }
        }
        // Every variant computes the same product; say so if one does not.
        for (size_t v = 0; v < vars.size(); ++v) vars[v].run(x.data(), w.data(), ys[v].data());
        for (size_t v = 1; v < vars.size(); ++v) {
          double maxd = 0;
          for (size_t i = 0; i < ys[0].size(); ++i) maxd = std::max(maxd, double(std::fabs(ys[v][i] - ys[0][i])));
          if (maxd > 1e-3) std::fprintf(stderr, "MISMATCH %s vs %s: %g\n", vars[v].name.c_str(), vars[0].name.c_str(), maxd);
        }
        double best = 1e30;
        for (auto& var : vars) best = std::min(best, median(var.samples_us));
        for (auto& var : vars) {
          double med = median(var.samples_us);
          std::printf("| %d | %d | %d | %d | %s | %.1f | %.1f | %.2f |\n", m, k, n, t, var.name.c_str(), med,
                      2.0 * m * k * n / med * 1e-3, med / best);
        }
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
