// The q8 path of matmul_quant (matmul_q8.h): every kernel computes each
// block's integer sum exactly and then runs the one float order of the
// header, so a row's output does not depend on which kernel ran it.
//  - up to four rows (decode): weight blocks are read straight from the GGUF
//    layout, eight output columns at a time; the eight per-column lane sums of
//    a block are reduced into one vector of eight column sums;
//  - more rows: a panel of weight rows is re-laid once per call (into L2) so
//    that one 32-bit lane holds four consecutive bytes of one column: a
//    broadcast of four activation bytes then feeds eight columns per
//    instruction, with no reduction (llama.cpp's repacked layouts work so).
//    The AVX512-VNNI variant lays the panel out for 512-bit vectors, sixteen
//    columns per instruction, with the same per-lane arithmetic.
// Integer products run on AVX512-VNNI / AVX-VNNI (vpdpbusd), or its exact
// AVX2 emulation, or scalar code: matmul_q8_body.inc is compiled once per
// instruction set, and the kernel is chosen at run time (select_q8_isa), so
// one build runs on any x86-64-v3 CPU and uses VNNI where the CPU has it.
// The AMX variant is the AVX512-VNNI one with full tiles of 16 rows on
// AMX-INT8 tiles (amx_tiles.h); "amx-emulated" runs that kernel with the
// tiles emulated in software, so that its layout and order are tested on any
// AVX-512 CPU.
#include "backend/cpu/matmul_q8.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/amx_tiles.h"
#include "backend/cpu/k8_layout.h"
#include "backend/cpu/matmul_q8_blocks.h"
#include "backend/cpu/matmul_quant_blocks.h"
#include "backend/cpu/simd.h"
#include "util/log.h"
#include "backend/cpu/asan_check.h"

namespace agentkv::cpu {
namespace {

using q8b::block_of;
using q8b::dw_mw;
using q8b::sub_of;
using q8b::with_type;
using quant::half;

inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

#define AGENTKV_Q8_NS q8_scalar
#define AGENTKV_Q8_SIMD 0
#define AGENTKV_Q8_VNNI 0
#include "backend/cpu/matmul_q8_body.inc"
#undef AGENTKV_Q8_NS
#undef AGENTKV_Q8_SIMD
#undef AGENTKV_Q8_VNNI

#if AGENTKV_AVX2
#define AGENTKV_Q8_NS q8_avx2
#define AGENTKV_Q8_SIMD 1
#define AGENTKV_Q8_VNNI 0
#include "backend/cpu/matmul_q8_body.inc"
#undef AGENTKV_Q8_NS
#undef AGENTKV_Q8_VNNI

// GCC compiles these two for their instruction sets only; clang builds (the
// fuzzers) keep the scalar and AVX2 kernels.
#if defined(__GNUC__) && !defined(__clang__)
#define AGENTKV_Q8_HAS_VNNI 1
#pragma GCC push_options
#pragma GCC target("avxvnni")
#define AGENTKV_Q8_NS q8_avxvnni
#define AGENTKV_Q8_VNNI 256
#include "backend/cpu/matmul_q8_body.inc"
#undef AGENTKV_Q8_NS
#undef AGENTKV_Q8_VNNI
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni")
#define AGENTKV_Q8_NS q8_avx512
#define AGENTKV_Q8_VNNI 512
#include "backend/cpu/matmul_q8_body.inc"
#undef AGENTKV_Q8_NS
#undef AGENTKV_Q8_VNNI
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,amx-tile,amx-int8")
#define AGENTKV_Q8_NS q8_amx
#define AGENTKV_Q8_VNNI 512
#define AGENTKV_Q8_AMX 1
#include "backend/cpu/matmul_q8_body.inc"
#undef AGENTKV_Q8_NS
#undef AGENTKV_Q8_VNNI
#undef AGENTKV_Q8_AMX
#pragma GCC pop_options
#endif
#undef AGENTKV_Q8_SIMD
#endif  // AGENTKV_AVX2

namespace {

struct Kernels {
  void (*quantize)(const float*, Q8Acts&, int64_t, int64_t) = nullptr;
  void (*gemm)(const Q8Acts&, const QuantMatrix&, float*, int64_t, int64_t, int64_t, bool) = nullptr;
  std::shared_ptr<const Q8Panel> (*prepack)(const QuantMatrix&, bool) = nullptr;
};

Kernels kernels_of(Q8Isa isa) {
  switch (isa) {
    case Q8Isa::kScalar:
      return {q8_scalar::quantize_rows, q8_scalar::gemm_rows, q8_scalar::prepack};
#if AGENTKV_AVX2
    case Q8Isa::kAvx2:
      return {q8_avx2::quantize_rows, q8_avx2::gemm_rows, q8_avx2::prepack};
#endif
#if AGENTKV_Q8_HAS_VNNI
    case Q8Isa::kAvxVnni:
      return {q8_avxvnni::quantize_rows, q8_avxvnni::gemm_rows, q8_avxvnni::prepack};
    case Q8Isa::kAvx512:
      return {q8_avx512::quantize_rows, q8_avx512::gemm_rows, q8_avx512::prepack};
    case Q8Isa::kAmxEmulated:
      return {q8_amx::quantize_rows, q8_amx::gemm_rows_emulated, q8_amx::prepack};
    case Q8Isa::kAmx:
      return {q8_amx::quantize_rows, q8_amx::gemm_rows, q8_amx::prepack};
#endif
    default:
      return {};
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// AVX-VNNI (CPUID.(EAX=7,ECX=1):EAX bit 4), read directly: clang before 16
// does not know the "avxvnni" name of __builtin_cpu_supports (the fuzz
// build's clang 14 refused it). The AVX2 check beside it covers the OS's
// YMM state.
bool cpuid_avx_vnni() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
  return (a >> 4) & 1u;
}

// AMX-TILE and AMX-INT8: CPUID.(EAX=7,ECX=0):EDX bits 24 and 25.
bool cpuid_amx_int8() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return ((d >> 24) & 1u) && ((d >> 25) & 1u);
}

// Linux gives a process the tile data state only on request
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); a tile instruction
// before it is SIGILL. Asked once for the process, and only when amx is
// asked for (--isa amx, or an error listing what is available); a refusal
// is logged once and AMX is then not available.
bool os_grants_amx() {
  static const bool granted = [] {
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0) return true;
    AKV_LOG_WARN("AMX: the CPU has AMX-INT8 but the kernel refused the tile state (arch_prctl ",
                 "ARCH_REQ_XCOMP_PERM; Linux 5.16+ grants it): amx is not available");
    return false;
  }();
  return granted;
}
#endif

bool cpu_has(Q8Isa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  switch (isa) {
    case Q8Isa::kScalar:
      return true;
    case Q8Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Q8Isa::kAvxVnni:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpuid_avx_vnni();
    case Q8Isa::kAvx512:
    case Q8Isa::kAmxEmulated:  // the AVX512-VNNI kernels with tiles in software
      // libgcc checks XCR0 too: the OS saves the AVX-512 state.
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    case Q8Isa::kAmx:
      return cpu_has(Q8Isa::kAvx512) && cpuid_amx_int8() && os_grants_amx();
  }
  return false;
#else
  return isa == Q8Isa::kScalar;
#endif
}

constexpr Q8Isa kAll[] = {Q8Isa::kScalar, Q8Isa::kAvx2,        Q8Isa::kAvxVnni,
                          Q8Isa::kAvx512, Q8Isa::kAmxEmulated, Q8Isa::kAmx};

// auto's choice. Not amx (opt-in, --isa amx): on AMX hardware it gives the
// same bits but its prefill measured 0.88-1.01x of avx512's (2026-12-01,
// docs/benchmarks.md, "AMX-INT8 on AMX hardware"), nor the emulation (for
// tests). So auto never asks the OS for the tile state.
Q8Isa best() {
  Q8Isa b = Q8Isa::kScalar;
  for (Q8Isa i : kAll) {
    // kAll is in increasing order of preference.
    if (i != Q8Isa::kAmxEmulated && i != Q8Isa::kAmx && q8_isa_available(i)) b = i;
  }
  return b;
}

std::atomic<int> g_isa{-1};  // -1: not chosen yet (auto on first use)

Kernels active() {
  int i = g_isa.load(std::memory_order_acquire);
  if (i < 0) {
    int want = -1;
    g_isa.compare_exchange_strong(want, static_cast<int>(best()), std::memory_order_acq_rel);
    i = g_isa.load(std::memory_order_acquire);
  }
  return kernels_of(static_cast<Q8Isa>(i));
}

}  // namespace

const char* q8_isa_name(Q8Isa isa) {
  switch (isa) {
    case Q8Isa::kScalar:
      return "scalar";
    case Q8Isa::kAvx2:
      return "avx2";
    case Q8Isa::kAvxVnni:
      return "avxvnni";
    case Q8Isa::kAvx512:
      return "avx512";
    case Q8Isa::kAmxEmulated:
      return "amx-emulated";
    case Q8Isa::kAmx:
      return "amx";
  }
  return "?";
}

bool q8_isa_built(Q8Isa isa) { return kernels_of(isa).gemm != nullptr; }

bool q8_isa_available(Q8Isa isa) { return q8_isa_built(isa) && cpu_has(isa); }

Q8Isa q8_isa() {
  (void)active();
  return static_cast<Q8Isa>(g_isa.load(std::memory_order_acquire));
}

Status select_q8_isa(std::string_view name) {
  if (name == "auto") {
    g_isa.store(static_cast<int>(best()), std::memory_order_release);
    return Status::ok();
  }
  // The ones available, for an error only: asking about amx asks the OS for
  // the tile state, which a process that chose another ISA should not hold.
  auto available_here = [] {
    std::string here;
    for (Q8Isa i : kAll) {
      if (q8_isa_available(i)) here += std::string(here.empty() ? "" : ", ") + q8_isa_name(i);
    }
    return here;
  };
  for (Q8Isa i : kAll) {
    if (name != q8_isa_name(i)) continue;
    if (!q8_isa_built(i)) {
      return make_error(ErrorCode::kInvalidArgument, "--isa ", name, ": not compiled into this build (",
                        "it needs GCC and an x86-64-v3 baseline); available here: ", available_here());
    }
    if (!cpu_has(i)) {
#if defined(__x86_64__) && defined(__GNUC__)
      if (i == Q8Isa::kAmx && cpu_has(Q8Isa::kAvx512) && cpuid_amx_int8()) {
        return make_error(
            ErrorCode::kInvalidArgument, "--isa amx: the kernel refused this process the tile ",
            "state (arch_prctl ARCH_REQ_XCOMP_PERM needs Linux 5.16+); available here: ", available_here());
      }
#endif
      return make_error(
          ErrorCode::kInvalidArgument, "--isa ", name, ": this CPU lacks it (see lscpu's flags: ",
          i == Q8Isa::kAmx ? "avx512f avx512bw avx512vl avx512_vnni amx_tile amx_int8"
          : i == Q8Isa::kAvx512 || i == Q8Isa::kAmxEmulated ? "avx512f avx512bw avx512vl avx512_vnni"
          : i == Q8Isa::kAvxVnni                            ? "avx_vnni"
                                                            : "avx2 fma",
          "); available here: ", available_here());
    }
    g_isa.store(static_cast<int>(i), std::memory_order_release);
    return Status::ok();
  }
  return make_error(
      ErrorCode::kInvalidArgument, "--isa ", name,
      ": unknown (expected auto, scalar, avx2, avxvnni, avx512, amx or amx-emulated); available here: ",
      available_here());
}

bool q8_supports(uint32_t type) {
  return q8b::with_type(type, [](auto) {});
}

void q8_resize(Q8Acts& a, int64_t m, int64_t k) {
  a.m = m;
  a.k = k;
  a.q.resize(size_t(m * k));
  a.d.resize(size_t(m * (k / 32)));
  a.qsum.resize(size_t(m * (k / 32)));
  a.qlo.resize(size_t(m * (k / 32)));
  a.s.resize(size_t(m * (k / 32)));
}

void q8_quantize_rows(const float* x, Q8Acts& a, int64_t r0, int64_t r1) { active().quantize(x, a, r0, r1); }

std::shared_ptr<const Q8Panel> q8_prepack(const QuantMatrix& w, bool decode_only) {
  if (!q8_supports(w.type) || w.k % 32 != 0 || w.n <= 0) return nullptr;
  return active().prepack(w, decode_only);
}

void q8_gemm_rows(const Q8Acts& x, const QuantMatrix& w, float* y, int64_t ldy, int64_t n0, int64_t n1,
                  bool accumulate) {
  if (w.k8 && q8_isa() == Q8Isa::kScalar) {
    // The scalar kernels read the file's blocks: the slice's, from the records.
    thread_local std::vector<uint8_t> file;
    const QuantMatrix f = k8_file_rows(w, n0, n1, file);
    active().gemm(x, f, y + n0, ldy, 0, n1 - n0, accumulate);
    return;
  }
  active().gemm(x, w, y, ldy, n0, n1, accumulate);
}

}  // namespace agentkv::cpu
