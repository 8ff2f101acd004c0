// Products of quantized weights with activations quantized to 8 bits
// (BackendConfig::act_quant = kQ8, llama.cpp's way): integer dot products per
// 32-element block, one float step per block, for q4_0, q4_1, q5_0, q5_1,
// q8_0, q4_K, q5_K and q6_K weights. Faster than matmul_quant's f32 path, at
// a cost in accuracy (tests/python/test_logits.py measures it on the Q4_1,
// Q4_0 and Q8_0 files; docs/usage.md, "--act-quant").
//
// The activation rule (q8_0's, with q8_1's block sum for the types with a
// minimum): for each row and 32-element block, d = max|x| / 127,
// q = round-half-even(x * (1/d)) (all zero when d == 0), qsum = sum(q),
// s = d * float(qsum), qlo = the sum of its first 16 q.
//
// The one order of every output (batch invariance, docs/design.md §4), whatever
// the kernel, row count or thread count:
//   acc = +0; for each 32-element block b in increasing order:
//     isum = sum over the block of wq * q      (exact, int32)
//     acc  = fma(float(isum), dw * d, acc)
//     acc  = fma(mw, s, acc)                    (q4_1, q5_1, q4_K, q5_K)
//   y = acc or y + acc
// where the weight block is dw * wq (+ mw): wq = q4 - 8 (q4_0), q4 (q4_1),
// q5 - 16 (q5_0), q5 (q5_1), q8 (q8_0); q4_K's (q5_K's) sub-block j of a
// super-block has wq = q4 (q5), dw = d * sc_j and mw = -(dmin * mn_j),
// products exact in f32.
// q6_K's blocks have one integer scale per 16 elements, so its
//   isum = sc_lo * sum_0..15(wq * q) + sc_hi * sum_16..31(wq * q)
// (exact, int32), wq = q6 - 32 and dw = d (matmul_q8_blocks.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "backend/backend.h"
#include "util/aligned_vector.h"
#include "util/huge_pages.h"
#include "util/status.h"

namespace agentkv::cpu {

// m rows of quantized activations over k elements (k a multiple of 32).
struct Q8Acts {
  int64_t m = 0, k = 0;
  AlignedVector<int8_t> q;      // (m, k)
  AlignedVector<float> d;       // (m, k / 32) block scales
  AlignedVector<int32_t> qsum;  // (m, k / 32) sum of the block's q
  AlignedVector<int32_t> qlo;   // (m, k / 32) sum of the block's first 16 q
  AlignedVector<float> s;       // (m, k / 32) d * float(qsum)
  const int8_t* row_q(int64_t r) const { return q.data() + r * k; }
};

// True for the weight types with a q8 path (the types above).
bool q8_supports(uint32_t type);

// The instruction set the q8 kernels run on, chosen at run time: every one
// computes the same bits (exact integer block sums, one float order).
// kAmx: AVX512-VNNI with full tiles of 16 rows on AMX-INT8, for every type
// (q6_K, whose halves have their own scales, as two products of K = 16 per
// block; opt-in: auto does not take it, no faster than kAvx512 where measured). kAmxEmulated: the same
// kernel with the tile instructions emulated in software (slow; for tests of
// that kernel on CPUs without AMX; auto never takes it).
enum class Q8Isa { kScalar, kAvx2, kAvxVnni, kAvx512, kAmxEmulated, kAmx };
const char* q8_isa_name(Q8Isa isa);
// Compiled into this build.
bool q8_isa_built(Q8Isa isa);
// Compiled in, and this CPU and OS run it.
bool q8_isa_available(Q8Isa isa);
// The kernels in use: the best available unless select_q8_isa chose one.
Q8Isa q8_isa();
// "auto" (the best available), or a name of q8_isa_name. An ISA this build
// or CPU lacks (or AMX where the OS refuses the tile state) is an error that
// says which are available. Call before work starts: it
// changes the kernels of every backend in the process.
Status select_q8_isa(std::string_view name);

// Sizes a for (m, k) without touching the values.
void q8_resize(Q8Acts& a, int64_t m, int64_t k);
// Quantizes rows [r0, r1) of x (m, k) into a (sized by q8_resize).
void q8_quantize_rows(const float* x, Q8Acts& a, int64_t r0, int64_t r1);

// A matrix's weights laid out once for the panel kernels: the layout a call
// with more than four rows otherwise builds per call, per column panel
// (matmul_q8.cpp). 32 bytes of integers and the scale as f32 per 32
// weights, the minimum as f32 (`m`, for q4_1, q5_1, q4_K and q5_K) and
// q6_K's two integer scales (`s`): 40 bytes for q4_1 (the file's 20), q5_1
// (24), q4_K (18) and q5_K (22), 36 for q4_0 (18), q5_0 (22) and q8_0 (34),
// 38 for q6_K (26.25).
// Read only by the kernel family that laid it out (`layout`), and only for
// column slices that start on one of its column groups; others build their
// panels per call as before. The bits are the same either way.
struct Q8Panel {
  int layout = 0;
  int64_t n = 0, k = 0;
  // The weights' size: on huge pages (util/huge_pages.h), as the matrices are.
  HugePageVector<uint8_t> q;
  HugePageVector<float> d, m;
  HugePageVector<int8_t> s;  // q6_K's two integer scales per 32 weights, empty for the other types
  // q4_K, q6_K, q5_0 and q8_0: the decode kernels' records of eight rows
  // (matmul_q8_k8.inc; 1184 bytes per eight columns and super-block for
  // q4_K, 1680 for q6_K, 176 and 272 per eight columns and block for q5_0
  // and q8_0), read by every SIMD variant; empty otherwise.
  HugePageVector<uint8_t> dec;
  int64_t bytes() const {
    return int64_t(q.size()) + int64_t(sizeof(float)) * int64_t(d.size() + m.size()) + int64_t(s.size()) +
           int64_t(dec.size());
  }
};
// w laid out for the active ISA's panel kernels, or null (q8_supports(w.type)
// false, or the scalar kernels, which read no panel).
// decode_only: the decode records alone (q4_K, q6_K; null for the other
// types), for a matrix whose products have a row per sequence.
std::shared_ptr<const Q8Panel> q8_prepack(const QuantMatrix& w, bool decode_only = false);
// The widest panel group (AVX-512's 16 columns): column slices that start on
// a multiple of it read a Q8Panel of any layout.
inline constexpr int64_t kQ8PanelCols = 16;

// y[i, j] (+)= the order above, for rows i < x.m and weight rows j in
// [n0, n1) (y row stride ldy). w.k == x.k and q8_supports(w.type). When
// w.layout is a Q8Panel of w (q8_prepack), prefill reads it instead of
// laying the panels out per call.
void q8_gemm_rows(const Q8Acts& x, const QuantMatrix& w, float* y, int64_t ldy, int64_t n0, int64_t n1,
                  bool accumulate);

}  // namespace agentkv::cpu
