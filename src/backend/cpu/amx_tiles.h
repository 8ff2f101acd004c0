// The AMX-INT8 tile operations the q8 prefill kernel uses
// (matmul_q8_body.inc, AGENTKV_Q8_AMX), twice: on the hardware (HwTiles, the
// tile instructions) and emulated in plain C++ (EmuTiles, the Intel SDM's
// pseudo-code of each instruction). The kernel is one template over either,
// so its data layout, block order and float steps are tested bit for bit on
// any AVX-512 machine (`--isa amx-emulated`), and on a machine with AMX only
// the instructions themselves are new.
//
// One tile configuration (palette 1), in two slots s = 0, 1 so that the tile
// unit can compute one block while the vector unit finishes the other:
//   C_s = tmm{s}    : 16 rows x 16 int32 (the 16 x 16 outputs of one block)
//   A_s = tmm{2+s}  : 16 rows x 32 int8  (16 activation rows, one block)
//   B_s = tmm{4+s}  :  8 rows x 64 uint8 (row i: bytes 4i..4i+3 of 16 columns)
// dp<s>() is TDPBSUD: C_s[m][n] += sum over k < 8, e < 4 of
// int8(A_s[m][4k+e]) * uint8(B_s[k][4n+e]), wrapping in 32 bits.
// The half configuration (configure(kHalf)) is the same with K = 16: A_s 16
// rows x 16 int8, B_s 4 rows x 64, so that the two slots take the two
// halves of one block (q6_K, whose halves have their own scales).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define AGENTKV_AMX_TILES 1
#endif

namespace agentkv::cpu::amx {

inline constexpr int kRows = 16;  // rows of A and C: a row tile
inline constexpr int kK = 32;     // bytes of an A row: one q8 block
inline constexpr int kN = 16;     // columns of C and of a B row's dwords

// The 64-byte operand of LDTILECFG (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// The bytes of an A row: a whole block, or half of one.
enum TileK : int { kWhole = kK, kHalf = kK / 2 };

inline TileConfig kernel_config(TileK k = kWhole) {
  TileConfig c;
  for (int s = 0; s < 2; ++s) {
    c.rows[s] = kRows, c.colsb[s] = kN * 4;          // C_s
    c.rows[2 + s] = kRows, c.colsb[2 + s] = k;       // A_s
    c.rows[4 + s] = k / 4, c.colsb[4 + s] = kN * 4;  // B_s
  }
  return c;
}

// The tile instructions in software, on one thread's eight tiles.
struct EmuTiles {
  struct State {
    TileConfig cfg;
    bool configured = false;
    alignas(64) uint8_t t[8][16][64];  // tmm0..7: 16 rows of 64 bytes
  };
  static State& state() {
    thread_local State s;
    return s;
  }
  static void configure(TileK k = kWhole) {
    State& s = state();
    s.cfg = kernel_config(k);
    std::memset(s.t, 0, sizeof s.t);  // LDTILECFG zeroes every tile
    s.configured = true;
  }
  static void release() { state().configured = false; }  // TILERELEASE
  // TILELOADD: rows x colsb bytes at p + r * stride; the rest of the tile zero.
  static void load(int t, const void* p, int64_t stride) {
    State& s = state();
    std::memset(s.t[t], 0, sizeof s.t[t]);
    for (int r = 0; r < s.cfg.rows[t]; ++r)
      std::memcpy(s.t[t][r], static_cast<const uint8_t*>(p) + r * stride, s.cfg.colsb[t]);
  }
  template <int s>
  static void zero_c() {
    std::memset(state().t[s], 0, sizeof state().t[s]);
  }
  template <int s>
  static void load_a(const int8_t* p, int64_t stride) {
    load(2 + s, p, stride);
  }
  template <int s>
  static void load_b(const uint8_t* p) {
    load(4 + s, p, kN * 4);
  }
  // TDPBSUD C_s, A_s, B_s (the shapes of kernel_config: A's colsb / 4 == B's
  // rows, C's colsb == B's colsb, C's rows == A's rows).
  template <int s>
  static void dp() {
    State& st = state();
    const TileConfig& c = st.cfg;
    const int tc = s, ta = 2 + s, tb = 4 + s;
    if (!st.configured || c.colsb[ta] / 4 != c.rows[tb] || c.colsb[tc] != c.colsb[tb] ||
        c.rows[tc] != c.rows[ta])
      __builtin_trap();  // #UD on the hardware
    // Column n of B as one run of bytes (k-major, as A's rows are), so that
    // each output is one plain dot product of 4 * K bytes.
    const int kd = c.colsb[ta] / 4, nd = c.colsb[tc] / 4;
    uint8_t bt[16][64];
    for (int n = 0; n < nd; ++n)
      for (int k = 0; k < kd; ++k) std::memcpy(&bt[n][4 * k], &st.t[tb][k][4 * n], 4);
    for (int m = 0; m < c.rows[tc]; ++m) {
      const int8_t* a = reinterpret_cast<const int8_t*>(st.t[ta][m]);
      for (int n = 0; n < nd; ++n) {
        int32_t dot = 0;  // at most 64 * 127 * 255: no overflow
        for (int i = 0; i < 4 * kd; ++i) dot += int32_t(a[i]) * int32_t(bt[n][i]);
        uint32_t acc;
        std::memcpy(&acc, &st.t[tc][m][4 * n], 4);
        acc += static_cast<uint32_t>(dot);  // the dword accumulation wraps
        std::memcpy(&st.t[tc][m][4 * n], &acc, 4);
      }
    }
  }
  // TILESTORED C_s: 16 rows of 16 int32, contiguous.
  template <int s>
  static void store_c(int32_t* p) {
    const State& st = state();
    for (int r = 0; r < kRows; ++r) std::memcpy(p + r * kN, st.t[s][r], kN * 4);
  }
};

#if AGENTKV_AMX_TILES
// The same on the hardware, compiled for AMX here and inlined into the
// kernel compiled for AVX-512 and AMX. The tile numbers are literals: GCC's
// tile intrinsics paste them into the instruction's text.
#pragma GCC push_options
#pragma GCC target("amx-tile,amx-int8")
struct HwTiles {
  // LDTILECFG at the start of every product and TILERELEASE at its end: the
  // tile configuration is neither caller- nor callee-saved, so other AMX
  // code on the thread (a BLAS) may have changed or released it since, and
  // a released thread carries no tile state through context switches. The
  // process asked the OS for the tile state before this ISA was chosen
  // (matmul_q8.cpp).
  static void configure(TileK k = kWhole) {
    static const TileConfig whole = kernel_config(kWhole), half = kernel_config(kHalf);
    _tile_loadconfig(k == kWhole ? &whole : &half);
  }
  static void release() { _tile_release(); }
  // GCC's tileloadd carries no memory input: the compiler fence keeps the
  // panel's and the activations' stores before it, however it inlines.
  static void fence() { asm volatile("" ::: "memory"); }
  template <int s>
  static void zero_c() {
    if constexpr (s == 0)
      _tile_zero(0);
    else
      _tile_zero(1);
  }
  template <int s>
  static void load_a(const int8_t* p, int64_t stride) {
    fence();
    if constexpr (s == 0)
      _tile_loadd(2, p, stride);
    else
      _tile_loadd(3, p, stride);
  }
  template <int s>
  static void load_b(const uint8_t* p) {
    fence();
    if constexpr (s == 0)
      _tile_loadd(4, p, kN * 4);
    else
      _tile_loadd(5, p, kN * 4);
  }
  template <int s>
  static void dp() {
    if constexpr (s == 0)
      _tile_dpbsud(0, 2, 4);
    else
      _tile_dpbsud(1, 3, 5);
  }
  template <int s>
  static void store_c(int32_t* p) {
    if constexpr (s == 0)
      _tile_stored(0, p, kN * 4);
    else
      _tile_stored(1, p, kN * 4);
  }
};
#pragma GCC pop_options
#endif

}  // namespace agentkv::cpu::amx
