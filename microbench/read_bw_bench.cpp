// bench_read_bw: the memory read bandwidth the cores sustain, STREAM-like
// (issue 55: decode of a large model reads every weight byte once per step,
// so its floor is weight bytes / this bandwidth). Each thread sums its own
// contiguous slice of one buffer much larger than the last-level cache with
// 256-bit loads into four independent accumulators, as the decode kernels
// stream their weight rows; the bytes read per second over all threads is
// the figure. The buffer is written once before timing (no zero pages), and
// each pass's sum feeds the result so the loads are not elided. The buffer
// is on 2 MiB pages where the kernel gives them, as the engine's weights
// are (util/huge_pages.h); --pages small reads 4 KiB pages (higher TLB cost:
// 1-thread reads measured 10-20% slower on AMD Zen 4, docs/benchmarks.md).
//   bench_read_bw --mib 2048 --thread-counts 1,2 -r 5
#include <immintrin.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "util/huge_pages.h"

namespace {

// Sums n bytes (a multiple of 128) from p with four 256-bit accumulators.
__attribute__((target("avx2"))) uint64_t read_slice(const uint8_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

// One measurement: every thread reads its slice `passes` times; returns GB/s.
double measure(const uint8_t* buf, size_t bytes, int threads, int passes, uint64_t& sink) {
  const size_t slice = bytes / size_t(threads) / 128 * 128;
  std::vector<uint64_t> sums(size_t(threads), 0);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      uint64_t s = 0;
      for (int p = 0; p < passes; ++p) s += read_slice(buf + size_t(t) * slice, slice);
      sums[size_t(t)] = s;
    });
  }
  for (auto& th : pool) th.join();
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (uint64_t s : sums) sink += s;
  return double(slice) * threads * passes / sec / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Memory read bandwidth (STREAM-like sum of a buffer far larger than the caches)"};
  int mib = 2048, reps = 5, passes = 3;
  std::vector<int> threads = {1, 2};
  std::string pages = "huge";
  app.add_option("--pages", pages, "huge: 2 MiB pages where the kernel's transparent huge pages allow (the engine's weights); small: 4 KiB pages")
      ->check(CLI::IsMember({"huge", "small"}));
  app.add_option("--mib", mib, "buffer size in MiB (far above the last-level cache)")->check(CLI::Range(64, 65536));
  app.add_option("-r,--reps", reps, "measurements per thread count; best and median are reported")
      ->check(CLI::Range(1, 100));
  app.add_option("--passes", passes, "reads of the whole buffer per measurement")->check(CLI::Range(1, 100));
  app.add_option("--thread-counts", threads, "thread counts, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(1, 256));
  CLI11_PARSE(app, argc, argv);
  if (!__builtin_cpu_supports("avx2")) {
    std::fprintf(stderr, "bench_read_bw: needs AVX2\n");
    return 1;
  }
  const size_t bytes = size_t(mib) << 20;
  auto* buf = static_cast<uint8_t*>(pages == "huge" ? agentkv::huge_pages_map(bytes) : std::aligned_alloc(64, bytes));
  if (!buf) {
    std::fprintf(stderr, "bench_read_bw: cannot allocate %d MiB\n", mib);
    return 1;
  }
  for (size_t i = 0; i < bytes; ++i) buf[i] = uint8_t(i * 131u + 7u);  // touch every page
  uint64_t sink = 0;
  std::printf("| threads | read GB/s (best of %d) | median |\n|---|---|---|\n", reps);
  for (int t : threads) {
    std::vector<double> gbs;
    for (int r = 0; r < reps; ++r) gbs.push_back(measure(buf, bytes, t, passes, sink));
    std::sort(gbs.begin(), gbs.end());
    std::printf("| %d | %.1f | %.1f |\n", t, gbs.back(), gbs[gbs.size() / 2]);
  }
  std::fprintf(stderr, "(checksum %llu, %d MiB buffer, %s pages)\n", static_cast<unsigned long long>(sink), mib,
               pages.c_str());
  if (pages == "huge") {
    agentkv::huge_pages_unmap(buf, bytes);
  } else {
    std::free(buf);
  }
  return 0;
}
