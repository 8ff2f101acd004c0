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
//   amx       tdpbssd on full tiles (16 x 64 bytes by 64 x 16): the tile unit's peak
//   amx-k32   tdpbsud on the q8 kernel's tiles (K = 32, one q8 block per product)
// The AMX loops run four independent C tiles (tmm0-3) from two A and two B
// tiles, after asking Linux for the tile state (arch_prctl).
// An ISA this CPU lacks is listed as such, never run.
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

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

// The AMX loops. Tile config (palette 1): C tiles 0-3 of 16 x 64 bytes, A
// tiles 4-5 of 16 rows x K bytes, B tiles 6-7 of K / 4 rows x 64 bytes.
struct alignas(64) AmxConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

AmxConfig amx_config(int k) {
  AmxConfig c;
  for (int t = 0; t < 4; ++t) c.rows[t] = 16, c.colsb[t] = 64;
  for (int t = 4; t < 6; ++t) c.rows[t] = 16, c.colsb[t] = static_cast<uint16_t>(k);
  for (int t = 6; t < 8; ++t) c.rows[t] = static_cast<uint8_t>(k / 4), c.colsb[t] = 64;
  return c;
}

template <int K>
__attribute__((target("amx-tile,amx-int8"))) int64_t run_amx(int64_t iters, int seed) {
  alignas(64) static thread_local int8_t in[16 * 64];
  alignas(64) static thread_local int32_t out[16 * 16];
  for (int i = 0; i < 16 * 64; ++i) in[i] = static_cast<int8_t>((seed + i) & 15);
  const AmxConfig cfg = amx_config(K);
  _tile_loadconfig(&cfg);
  // (tile numbers are literals: GCC pastes them into the instruction text)
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, in, 64);
  _tile_loadd(5, in, 64);
  _tile_loadd(6, in, 64);
  _tile_loadd(7, in, 64);
  for (int64_t i = 0; i < iters; ++i) {
    if constexpr (K == 64) {
      _tile_dpbssd(0, 4, 6);
      _tile_dpbssd(1, 4, 7);
      _tile_dpbssd(2, 5, 6);
      _tile_dpbssd(3, 5, 7);
    } else {
      _tile_dpbsud(0, 4, 6);
      _tile_dpbsud(1, 4, 7);
      _tile_dpbsud(2, 5, 6);
      _tile_dpbsud(3, 5, 7);
    }
  }
  _tile_stored(0, out, 64);
  int64_t sum = out[0];
  _tile_stored(3, out, 64);
  sum += out[255];
  _tile_release();
  return sum;
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

// CPUID.(7,0):EDX bits 24 (AMX-TILE) and 25 (AMX-INT8), and the tile state
// granted by Linux (5.16+) on request, once for the process.
bool has_amx() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((d >> 24) & 1u) || !((d >> 25) & 1u)) return false;
  static const bool granted =
      syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
  return granted;
}

const Isa kIsas[] = {{"avx2", run_avx2, has_avx2, kChains * 32},
                     {"avx2-wide", run_avx2_wide, has_avx2, kChains * 32},
                     {"avxvnni", run_avxvnni, has_avxvnni, kVexChains * 32},
                     {"avx512", run_avx512, has_avx512, kVnniChains * 32},
                     {"avx512-zmm", run_avx512_zmm, has_avx512, kVnniChains * 64},
                     {"amx", run_amx<64>, has_amx, 4 * 16 * 16 * 64},
                     {"amx-k32", run_amx<32>, has_amx, 4 * 16 * 16 * 32}};

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
  return 0;
}
