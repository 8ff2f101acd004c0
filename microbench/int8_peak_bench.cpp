// bench_int8_peak: the int8 multiply-add rate one core sustains with each
// instruction set the q8 kernels use (issue 31: prefill is reported as a
// share of it). Each kernel keeps its accumulators in registers and runs
// independent chains, so the rate is the units' throughput, not a memory
// bound: the ceiling a matmul on that ISA can approach.
//   avx2      pmaddubsw + pmaddwd by ones (+ add): the AVX2 q8 path of 4-bit weights
//   avx2-wide vpmovzx/sxbw + pmaddwd + phaddd: the exact emulation q8_0 weights take
//   avxvnni   vpdpbusd on 256-bit vectors (AVX-VNNI)
//   avx512    vpdpbusd on 256-bit vectors (AVX512-VNNI + VL), as the q8 decode kernels use it
//   avx512-zmm vpdpbusd on 512-bit vectors, as the q8 prefill (panel) kernels use it
// The VNNI loops run 8 (AVX-VNNI) or 12 (AVX-512) accumulator chains:
// vpdpbusd's latency is 4-5 cycles at up to two per cycle, and fewer chains
// would measure the latency.
// An ISA this CPU lacks is listed as such, never run. AMX is not measured:
// there is no AMX kernel yet.
#include <immintrin.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kChains = 6;        // independent chains (inputs and accumulators fit the 16 ymm registers)
constexpr int64_t kInner = 4096;  // iterations between clock reads

// Each returns a value derived from every accumulator, so nothing is elided.
// The AVX2 kernels' products are pure functions of loop-invariant inputs,
// which the compiler would hoist: an empty asm statement makes the shared
// input opaque on every iteration at no cost in instructions. (Until 2026-11-28
// they stepped each input by a byte add instead, one more vector op per
// product that the kernels do not run: the AVX2 figures of 2026-11-27 are
// low by up to a quarter.)
using Kernel = int64_t (*)(int64_t iters, int seed);
constexpr int kVnniChains = 12;  // accumulators only (the inputs are loop-invariant)

// Six chains in named variables (as arrays, GCC 12 kept some on the
// stack): 6 accumulators, 6 inputs and 2 constants fit the 16 ymm registers. Each chain's product is
// off its accumulator's path (one add per step), so six saturate the units.
#define AGENTKV_SIX(X) X(0) X(1) X(2) X(3) X(4) X(5)

__attribute__((target("avx2,fma"))) int64_t run_avx2(int64_t iters, int seed) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i s = _mm256_set1_epi8(static_cast<char>(seed | 1));
#define INIT(c) \
  __m256i a##c = _mm256_setzero_si256(), u##c = _mm256_set1_epi8(static_cast<char>((seed + c) & 15));
  AGENTKV_SIX(INIT)
#undef INIT
  for (int64_t i = 0; i < iters; ++i) {
    __asm__("" : "+x"(s));
#define STEP(c) a##c = _mm256_add_epi32(a##c, _mm256_madd_epi16(_mm256_maddubs_epi16(u##c, s), ones));
    AGENTKV_SIX(STEP)
#undef STEP
  }
  const __m256i t = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)),
                                     _mm256_add_epi32(a4, a5));
  return _mm256_extract_epi32(t, 0);
}

__attribute__((target("avx2,fma"))) int64_t run_avx2_wide(int64_t iters, int seed) {
  const __m256i s = _mm256_set1_epi8(static_cast<char>(seed | 1));
  __m256i s_lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(s));
  __m256i s_hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(s, 1));
#define INIT(c) \
  __m256i a##c = _mm256_setzero_si256(), u##c = _mm256_set1_epi8(static_cast<char>((seed + c) & 15));
  AGENTKV_SIX(INIT)
#undef INIT
  for (int64_t i = 0; i < iters; ++i) {
    __asm__("" : "+x"(s_lo), "+x"(s_hi));
    // The kernels' emulation widens both operands; the activations' widening
    // is hoisted here, which flatters this figure slightly.
#define STEP(c)                                                                                          \
  {                                                                                                      \
    const __m256i lo = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(u##c)), s_lo);      \
    const __m256i hi = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(u##c, 1)), s_hi); \
    a##c = _mm256_add_epi32(a##c, _mm256_permute4x64_epi64(_mm256_hadd_epi32(lo, hi), 0xd8));            \
  }
    AGENTKV_SIX(STEP)
#undef STEP
  }
  const __m256i t = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)),
                                     _mm256_add_epi32(a4, a5));
  return _mm256_extract_epi32(t, 0);
}
#undef AGENTKV_SIX

// AVX-VNNI has 16 vector registers: 8 chains and the 3 inputs fit (with 12,
// GCC spilled the accumulators to the stack on every iteration).
constexpr int kVexChains = 8;
__attribute__((target("avx2,avxvnni"))) int64_t run_avxvnni(int64_t iters, int seed) {
  // Named accumulators: as an array, GCC 12 stored some to the stack on every iteration.
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  const __m256i u0 = _mm256_set1_epi8(static_cast<char>(seed & 15)),
                u1 = _mm256_set1_epi8(static_cast<char>(seed & 7));
  const __m256i s = _mm256_set1_epi8(static_cast<char>(seed | 1));
  for (int64_t i = 0; i < iters; ++i) {
    a0 = _mm256_dpbusd_avx_epi32(a0, u0, s), a1 = _mm256_dpbusd_avx_epi32(a1, u1, s);
    a2 = _mm256_dpbusd_avx_epi32(a2, u0, s), a3 = _mm256_dpbusd_avx_epi32(a3, u1, s);
    a4 = _mm256_dpbusd_avx_epi32(a4, u0, s), a5 = _mm256_dpbusd_avx_epi32(a5, u1, s);
    a6 = _mm256_dpbusd_avx_epi32(a6, u0, s), a7 = _mm256_dpbusd_avx_epi32(a7, u1, s);
  }
  const __m256i t = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)),
                                     _mm256_add_epi32(_mm256_add_epi32(a4, a5), _mm256_add_epi32(a6, a7)));
  return _mm256_extract_epi32(t, 0);
}

__attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512vnni"))) int64_t run_avx512(int64_t iters,
                                                                                        int seed) {
  __m256i acc[kVnniChains];
  for (auto& a : acc) a = _mm256_setzero_si256();
  const __m256i u0 = _mm256_set1_epi8(static_cast<char>(seed & 15)),
                u1 = _mm256_set1_epi8(static_cast<char>(seed & 7));
  const __m256i s = _mm256_set1_epi8(static_cast<char>(seed | 1));
  for (int64_t i = 0; i < iters; ++i) {
    for (int c = 0; c < kVnniChains; ++c) acc[c] = _mm256_dpbusd_epi32(acc[c], c & 1 ? u1 : u0, s);
  }
  for (int c = 1; c < kVnniChains; ++c) acc[0] = _mm256_add_epi32(acc[0], acc[c]);
  return _mm256_extract_epi32(acc[0], 0);
}

__attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512vnni"))) int64_t run_avx512_zmm(int64_t iters,
                                                                                            int seed) {
  __m512i acc[kVnniChains];
  for (auto& a : acc) a = _mm512_setzero_si512();
  const __m512i u0 = _mm512_set1_epi8(static_cast<char>(seed & 15)),
                u1 = _mm512_set1_epi8(static_cast<char>(seed & 7));
  const __m512i s = _mm512_set1_epi8(static_cast<char>(seed | 1));
  for (int64_t i = 0; i < iters; ++i) {
    for (int c = 0; c < kVnniChains; ++c) acc[c] = _mm512_dpbusd_epi32(acc[c], c & 1 ? u1 : u0, s);
  }
  for (int c = 1; c < kVnniChains; ++c) acc[0] = _mm512_add_epi32(acc[0], acc[c]);
  return _mm512_cvtsi512_si32(acc[0]);
}

struct Isa {
  const char* name;
  Kernel kernel;
  bool (*has)();
  int64_t macs_per_iter;  // u8 x s8 products of one loop iteration
};

bool has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
bool has_avxvnni() { return has_avx2() && __builtin_cpu_supports("avxvnni"); }
bool has_avx512() {
  return has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

const Isa kIsas[] = {{"avx2", run_avx2, has_avx2, kChains * 32},
                     {"avx2-wide", run_avx2_wide, has_avx2, kChains * 32},
                     {"avxvnni", run_avxvnni, has_avxvnni, kVexChains * 32},
                     {"avx512", run_avx512, has_avx512, kVnniChains * 32},
                     {"avx512-zmm", run_avx512_zmm, has_avx512, kVnniChains * 64}};

// MACs per second of `threads` threads running k for about `seconds`.
double rate(const Isa& isa, int threads, double seconds) {
  const Kernel k = isa.kernel;
  std::vector<double> per(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      volatile int64_t sink = k(kInner, t);  // warm-up
      const auto t0 = std::chrono::steady_clock::now();
      int64_t steps = 0;
      double elapsed = 0;
      while (elapsed < seconds) {
        sink = sink + k(kInner, static_cast<int>(steps));
        steps += kInner;
        elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
      per[t] = static_cast<double>(steps) * static_cast<double>(isa.macs_per_iter) / elapsed;
    });
  }
  for (auto& th : pool) th.join();
  double sum = 0;
  for (double r : per) sum += r;
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Peak int8 multiply-add rate per instruction set of the q8 kernels (register-resident loops)"};
  double seconds = 1.0;
  int reps = 3;
  std::vector<int> threads = {1};
  app.add_option("--seconds", seconds, "time per measurement")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 60.0));
  app.add_option("-r,--reps", reps, "measurements per ISA and thread count; the best is reported")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  app.add_option("--thread-counts", threads, "thread counts, comma-separated")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  CLI11_PARSE(app, argc, argv);
  std::printf("| isa | threads | int8 GMAC/s (best of %d) |\n|---|---|---|\n", reps);
  for (const Isa& isa : kIsas) {
    if (!isa.has()) {
      std::printf("| %s | | not on this CPU |\n", isa.name);
      continue;
    }
    for (int t : threads) {
      double best = 0;
      for (int r = 0; r < reps; ++r) best = std::max(best, rate(isa, t, seconds));
      std::printf("| %s | %d | %.1f |\n", isa.name, t, best / 1e9);
    }
  }
  std::printf("| amx | | no AMX kernel yet: not measured |\n");
  return 0;
}
