// matmul_quant with 8-bit activations (ActQuant::kQ8) against a plain
// reference written here from the rule in backend/cpu/matmul_q8.h: the
// activations quantized per 32-value block, each block's integer sum in
// int64, one fma per block in increasing order. The kernels must give that
// bit for bit, for every row count (direct and panel kernels), thread count
// and column tail. The reference's weight decoding is itself checked against
// the format module's dequantize_row.
#include "backend/cpu/matmul_q8.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "format/fp16.h"
#include "format/ggml_type.h"
#include "quant_helpers.h"
#include "test_helpers.h"

namespace agentkv {
namespace {

using test::random_matrix;
using test::random_vec;

struct QRow {
  std::vector<int> q;       // k
  std::vector<float> d, s;  // per block
  std::vector<int> qsum;    // per block
};

QRow quantize(const float* x, int64_t k) {
  QRow r;
  r.q.resize(k);
  for (int64_t b = 0; b < k / 32; ++b) {
    float amax = 0.0f;
    for (int e = 0; e < 32; ++e) amax = std::max(amax, std::fabs(x[b * 32 + e]));
    const float d = amax / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    if (!std::isfinite(id)) id = 0.0f;  // a max below ~3.7e-37: zeros (matmul_q8_body.inc)
    int sum = 0;
    for (int e = 0; e < 32; ++e) {
      const float v = x[b * 32 + e] * id;
      const int q = static_cast<int>(std::nearbyint(v));
      r.q[b * 32 + e] = q;
      sum += q;
    }
    r.d.push_back(d);
    r.qsum.push_back(sum);
    r.s.push_back(d * static_cast<float>(sum));
  }
  return r;
}

// 32-element block b of a weight row: integer quants, scale, minimum and
// q6_K's two integer scales (value dw * sc * wq + mw, sc = sc_lo for
// elements 0-15 and sc_hi for 16-31), decoded here from the GGUF layouts.
struct WBlock {
  int wq[32];
  float dw, mw = 0.0f;
  int sc_lo = 1, sc_hi = 1;
};

bool has_min(GgmlType t) {
  return t == GgmlType::kQ4_1 || t == GgmlType::kQ5_1 || t == GgmlType::kQ4_K || t == GgmlType::kQ5_K;
}

int nibble(const uint8_t* qs, int e) { return e < 16 ? qs[e] & 0x0f : qs[e - 16] >> 4; }

uint32_t u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

WBlock weight_block(GgmlType t, const uint8_t* row, int64_t b) {
  WBlock w{};
  const int64_t bytes = ggml_type_traits(static_cast<uint32_t>(t))->block_bytes;
  const uint8_t* blk = row + b * bytes;
  switch (t) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1: {
      const bool q41 = t == GgmlType::kQ4_1;
      w.dw = load_fp16(blk);
      if (q41) w.mw = load_fp16(blk + 2);
      for (int e = 0; e < 32; ++e) w.wq[e] = nibble(blk + (q41 ? 4 : 2), e) - (q41 ? 0 : 8);
      return w;
    }
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1: {
      const bool q51 = t == GgmlType::kQ5_1;
      w.dw = load_fp16(blk);
      if (q51) w.mw = load_fp16(blk + 2);
      const uint32_t qh = u32_at(blk + (q51 ? 4 : 2));
      for (int e = 0; e < 32; ++e)
        w.wq[e] = (nibble(blk + (q51 ? 8 : 6), e) | int((qh >> e) & 1u) << 4) - (q51 ? 0 : 16);
      return w;
    }
    case GgmlType::kQ8_0:
      w.dw = load_fp16(blk);
      for (int e = 0; e < 32; ++e) w.wq[e] = static_cast<int8_t>(blk[2 + e]);
      return w;
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {
      // Super-block of 256: d, dmin, 12 bytes of 6-bit (scale, min) pairs,
      // q5_K's 32 bytes of fifth bits (bit j of byte e: element e of
      // sub-block j), 128 of nibbles.
      const bool q5k = t == GgmlType::kQ5_K;
      const uint8_t* sb = row + (b / 8) * (q5k ? 176 : 144);
      const int j = static_cast<int>(b % 8);
      const uint8_t* sc = sb + 4;
      const int scale = j < 4 ? sc[j] & 63 : (sc[j + 4] & 15) | (sc[j - 4] >> 6) << 4;
      const int mn = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | (sc[j] >> 6) << 4;
      w.dw = load_fp16(sb) * static_cast<float>(scale);
      w.mw = -(load_fp16(sb + 2) * static_cast<float>(mn));
      const uint8_t* qs = sb + (q5k ? 48 : 16);
      for (int e = 0; e < 32; ++e)
        w.wq[e] = ((qs[32 * (j / 2) + e] >> (4 * (j % 2))) & 15) | (q5k ? ((sb[16 + e] >> j) & 1) << 4 : 0);
      return w;
    }
    case GgmlType::kQ6_K: {
      // Super-block of 256: ql[128], qh[64], 16 int8 scales, d.
      const uint8_t* sb = row + (b / 8) * 210;
      const int j = static_cast<int>(b % 8), h = j / 4, g = j % 4;
      w.dw = load_fp16(sb + 208);
      w.sc_lo = static_cast<int8_t>(sb[192 + 2 * j]);
      w.sc_hi = static_cast<int8_t>(sb[192 + 2 * j + 1]);
      for (int e = 0; e < 32; ++e) {
        const int lo4 = (sb[64 * h + 32 * (g % 2) + e] >> (4 * (g / 2))) & 15;
        const int hi2 = (sb[128 + 32 * h + e] >> (2 * g)) & 3;
        w.wq[e] = (lo4 | hi2 << 4) - 32;
      }
      return w;
    }
    default:
      ADD_FAILURE() << "no q8 decoding for type " << static_cast<int>(t);
      return w;
  }
}

// The rule's output, and the bound of its distance to the exact product with
// f32 x: each x value moves by at most d/2 when rounded, so |y - exact| <=
// sum |w| d / 2 (plus float rounding, covered by a relative 1e-5 of sum |w x|).
struct Want {
  std::vector<float> y;
  std::vector<double> exact, bound;
};

Want reference(GgmlType t, const std::vector<uint8_t>& w, int64_t row_bytes, const std::vector<float>& x,
               const std::vector<float>& y0, int64_t m, int64_t k, int64_t n, bool accumulate) {
  Want out;
  out.y.resize(m * n);
  out.exact.resize(m * n);
  out.bound.resize(m * n);
  for (int64_t i = 0; i < m; ++i) {
    const QRow xq = quantize(x.data() + i * k, k);
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      double exact = accumulate ? y0[i * n + j] : 0.0, bound = 0.0, mag = 0.0;
      for (int64_t b = 0; b < k / 32; ++b) {
        const WBlock wb = weight_block(t, w.data() + j * row_bytes, b);
        int64_t lo = 0, hi = 0;
        for (int e = 0; e < 32; ++e) {
          (e < 16 ? lo : hi) += int64_t(wb.wq[e]) * xq.q[b * 32 + e];
          const double wv = double(wb.dw) * (e < 16 ? wb.sc_lo : wb.sc_hi) * wb.wq[e] + wb.mw;
          exact += wv * x[i * k + b * 32 + e];
          bound += std::fabs(wv) * xq.d[b] / 2;
          mag += std::fabs(wv * x[i * k + b * 32 + e]);
        }
        const int64_t isum = wb.sc_lo * lo + wb.sc_hi * hi;
        EXPECT_LT(std::abs(isum), int64_t(1) << 24);  // float(isum) exact; in int32 with room
        acc = std::fma(static_cast<float>(isum), wb.dw * xq.d[b], acc);
        if (has_min(t)) acc = std::fma(wb.mw, xq.s[b], acc);
      }
      out.y[i * n + j] = accumulate ? y0[i * n + j] + acc : acc;
      out.exact[i * n + j] = exact;
      out.bound[i * n + j] = bound + 1e-5 * (mag + std::fabs(exact));
    }
  }
  return out;
}

const GgmlType kTypes[] = {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                           GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

class MatmulQ8Test : public ::testing::TestWithParam<GgmlType> {};

TEST_P(MatmulQ8Test, WeightDecodingMatchesTheFormatModule) {
  const GgmlType t = GetParam();
  const auto tr = *ggml_type_traits(static_cast<uint32_t>(t));
  std::mt19937 rng(7);
  // Two file blocks: 64 elements, or 512 of a K type.
  const int64_t k = 2 * tr.block_elems;
  const auto w = random_matrix(rng, t, 1, k, 2 * tr.block_bytes);
  std::vector<float> deq(k);
  ASSERT_TRUE(dequantize_row(t, w.data(), deq.data(), k).is_ok());
  for (int64_t b = 0; b < k / 32; ++b) {
    const WBlock wb = weight_block(t, w.data(), b);
    for (int e = 0; e < 32; ++e) {
      const double scaled = double(wb.dw) * (e < 16 ? wb.sc_lo : wb.sc_hi) * wb.wq[e];
      // The format module rounds its own way (q4_K: d * sc * q - dmin * mn
      // in f32): a few f32 roundings of the terms' size apart, at most.
      EXPECT_NEAR(scaled + wb.mw, deq[b * 32 + e], 4e-7 * (std::fabs(scaled) + std::fabs(wb.mw)) + 1e-30)
          << b << " " << e;
    }
  }
}

void check_rule(GgmlType t) {
  const uint32_t id = static_cast<uint32_t>(t);
  const auto tr = *ggml_type_traits(id);
  auto be1 = backend_cpu_init({.n_threads = 1, .act_quant = ActQuant::kQ8});
  auto be2 = backend_cpu_init({.n_threads = 2, .act_quant = ActQuant::kQ8});
  // With the weights laid out at load (prepare_weights), at 1 and 3
  // threads: with a layout the backend starts every prefill slice on a
  // 16-column group (q8_align), so both read it throughout; a slice off the
  // groups is ASliceOffTheLayoutsGroupsBuildsItsOwnPanels' case.
  auto pre1 = backend_cpu_init({.n_threads = 1, .act_quant = ActQuant::kQ8, .prepack_weights = true});
  auto pre3 = backend_cpu_init({.n_threads = 3, .act_quant = ActQuant::kQ8, .prepack_weights = true});
  const bool has_layout = backend_cpu_isa() != std::string("scalar");  // the scalar kernels read no panel
  std::mt19937 rng(99 + id);
  struct Case {
    int64_t k_blocks, n, pad;
  };
  // n = 301 with 18 blocks spans two panels of 176 columns; 1, 7, 37 leave
  // column tails inside a group of eight; m = 1..4 run the direct kernel,
  // 5, 8, 13 the panel one (13: a tail of one row); 16, 17 and 35 full tiles
  // of 16 rows, which the amx kernels run in AMX tiles, with row tails of 1
  // and 3 left to the panel kernel.
  // K types: blocks of 256 elements (eight of 32), so k_blocks rounds up to 8.
  const Case cases[] = {{1, 1, 0}, {1, 7, 0}, {3, 37, 5}, {2, 64, 0}, {18, 301, 0}, {48, 24, 3}};
  const int64_t per_file_block = tr.block_elems / 32;
  for (const Case& c0 : cases) {
    Case c = c0;
    c.k_blocks = (c.k_blocks + per_file_block - 1) / per_file_block * per_file_block;
    const int64_t k = c.k_blocks * 32, n = c.n,
                  row_bytes = c.k_blocks / per_file_block * tr.block_bytes + c.pad;
    const auto w = random_matrix(rng, t, n, k, row_bytes);
    const QuantMatrix qm{id, w.data(), row_bytes, n, k};
    const PreparedWeights laid = pre1->prepare_weights(qm);
    ASSERT_EQ(laid.layout != nullptr, has_layout);
    if (has_layout) {
      // 32 bytes of integers and the f32 scale per 32 weights, the f32
      // minimum (q4_1, q5_1, q4_K, q5_K) or q6_K's two i8 scales, for every column
      // padded to the layout's group (8 or 16).
      // q4_K, q6_K, q5_0 and q8_0 add the decode kernels' records of eight
      // rows (matmul_q8_k8.inc): 1184 and 1680 bytes per super-block, 176
      // and 272 per 32-weight block.
      const int64_t per_block = has_min(t) ? 40 : t == GgmlType::kQ6_K ? 38 : 36;
      const int64_t dec = t == GgmlType::kQ4_K   ? (n + 7) / 8 * (k / 256) * 1184
                          : t == GgmlType::kQ6_K ? (n + 7) / 8 * (k / 256) * 1680
                          : t == GgmlType::kQ5_0 ? (n + 7) / 8 * (k / 32) * 176
                          : t == GgmlType::kQ8_0 ? (n + 7) / 8 * (k / 32) * 272
                                                 : 0;
      EXPECT_GE(laid.bytes, n * (k / 32) * per_block + dec);
      EXPECT_LE(laid.bytes, (n + 15) / 16 * 16 * (k / 32) * per_block + dec);
    }
    QuantMatrix qp = qm;
    qp.layout = laid.layout.get();
    for (int64_t m : {1, 2, 3, 4, 5, 8, 13, 16, 17, 35}) {
      for (bool accumulate : {false, true}) {
        auto x = random_vec(rng, m * k);
        if (m > 1) std::fill(x.begin() + k, x.begin() + k + 32, 0.0f);  // a zero block: d = 0
        const auto y0 = random_vec(rng, m * n);
        const Want want = reference(t, w, row_bytes, x, y0, m, k, n, accumulate);
        auto y1 = y0, y2 = y0, y3 = y0, y4 = y0;
        be1->matmul_quant(x.data(), qm, y1.data(), m, accumulate);
        be2->matmul_quant(x.data(), qm, y2.data(), m, accumulate);
        pre1->matmul_quant(x.data(), qp, y3.data(), m, accumulate);
        pre3->matmul_quant(x.data(), qp, y4.data(), m, accumulate);
        const std::string where = std::string(tr.name) + " m=" + std::to_string(m) +
                                  " k=" + std::to_string(k) + " n=" + std::to_string(n);
        EXPECT_EQ(y1, want.y) << where << " acc=" << accumulate;
        EXPECT_EQ(y2, want.y) << where << " (2 threads)";
        EXPECT_EQ(y3, want.y) << where << " (laid out at load)";
        EXPECT_EQ(y4, want.y) << where << " (laid out at load, 3 threads)";
        for (int64_t i = 0; i < m * n; ++i)
          ASSERT_LE(std::fabs(y1[i] - want.exact[i]), want.bound[i]) << where << " i=" << i;
      }
    }
  }
}

TEST_P(MatmulQ8Test, EqualsTheRuleBitForBit) { check_rule(GetParam()); }

// Every instruction set's kernels give the rule's bits (the same bits as each
// other): each one this build has and this CPU runs, forced in turn. The
// suite is instantiated for those only (a skip fails CI); which ones run here
// is checked against /proc/cpuinfo's flags below, and the others are named.
std::vector<std::string> available_isas() {
  std::vector<std::string> out;
  for (const char* name : {"scalar", "avx2", "avxvnni", "avx512", "amx-emulated", "amx"}) {
    if (backend_cpu_select_isa(name).is_ok()) out.push_back(name);
  }
  EXPECT_TRUE(backend_cpu_select_isa("auto").is_ok());
  return out;
}

class MatmulQ8IsaTest : public ::testing::TestWithParam<std::string> {};

struct IsaGuard {
  ~IsaGuard() { EXPECT_TRUE(backend_cpu_select_isa("auto").is_ok()); }
};

TEST_P(MatmulQ8IsaTest, EveryTypeEqualsTheRuleBitForBit) {
  IsaGuard restore;
  ASSERT_TRUE(backend_cpu_select_isa(GetParam()).is_ok());
  EXPECT_EQ(backend_cpu_isa(), GetParam());
  for (GgmlType t : kTypes) {
    SCOPED_TRACE(GetParam());
    check_rule(t);
  }
}

// w against activations of magnitude 127 throughout (x = +-3, alternating
// sign every `run` values, the last one flipped), m = 1, 5, 16 and 21 rows
// (direct, panel, AMX tile and tail), bit for bit against the rule.
void expect_the_rule_at_full_scale(const std::string& isa, GgmlType t, const std::vector<uint8_t>& w,
                                   int64_t row_bytes, int64_t k, int64_t n, int64_t run) {
  const QuantMatrix qm{static_cast<uint32_t>(t), w.data(), row_bytes, n, k};
  // The same matrix held in the decode records (QuantMatrix::k8), where the
  // type has them: their kernels meet the same edges.
  const bool k8 = backend_cpu_k8_type(qm.type) && isa != "scalar";
  const WeightBytes rec = k8 ? backend_cpu_k8_records(qm) : WeightBytes();
  QuantMatrix qk = qm;
  qk.data = rec.data();
  qk.k8 = true;
  auto be = backend_cpu_init({.n_threads = 1, .act_quant = ActQuant::kQ8});
  for (int64_t m : {1, 5, 16, 21}) {
    std::vector<float> x(m * k);
    for (int64_t i = 0; i < m * k; ++i) x[i] = (i / run) % 2 == 0 ? -3.0f : 3.0f;  // q = -127 or 127
    x[m * k - 1] = -x[m * k - 1];
    const std::vector<float> y0(m * n, 0.0f);
    const Want want = reference(t, w, row_bytes, x, y0, m, k, n, false);
    std::vector<float> y(m * n);
    be->matmul_quant(x.data(), qm, y.data(), m, false);
    EXPECT_EQ(y, want.y) << isa << " m=" << m;
    if (k8) {
      be->matmul_quant(x.data(), qk, y.data(), m, false);
      EXPECT_EQ(y, want.y) << isa << " records, m=" << m;
    }
  }
}

// q8_0 at the edges of the integer paths: weight bytes -128, -127 and 127
// against activations of +-127 (every x of magnitude max|x|), with signs
// that make every pair of products the same sign, so that a 16-bit pair sum
// reaches its largest, 2 * 128 * 127 = 32512 (AVX2's sign trick must not
// saturate, VNNI's offset must not overflow).
TEST_P(MatmulQ8IsaTest, Q8_0AtTheIntegerEdgesEqualsTheRule) {
  IsaGuard restore;
  ASSERT_TRUE(backend_cpu_select_isa(GetParam()).is_ok());
  const GgmlType t = GgmlType::kQ8_0;
  const int64_t k = 4 * 32, n = 16, row_bytes = 4 * 34;
  std::vector<uint8_t> w(n * row_bytes);
  const uint8_t edges[] = {0x80, 0x81, 0x7f};
  for (int64_t j = 0; j < n; ++j)
    for (int64_t b = 0; b < 4; ++b) {
      uint8_t* blk = w.data() + j * row_bytes + b * 34;
      const uint16_t one = 0x3c00;  // f16 1.0
      std::memcpy(blk, &one, 2);
      for (int e = 0; e < 32; ++e) blk[2 + e] = edges[(j + (b == 3 ? e : 0)) % 3];
    }
  expect_the_rule_at_full_scale(GetParam(), t, w, row_bytes, k, n, 32);
}

// q6_K at the edges of its integer sums: quants 0 and 63 (wq -32 and 31)
// under scales -128 and 127, against activations of +-127. The largest
// block sum, 2 * 128 * 16 * 32 * 127 = 16,646,144, stays under 2^24 (the
// reference asserts it), and no partial sum of any kernel overflows int32
// nor, on AVX2, a 16-bit pair (2 * 63 * 127).
TEST_P(MatmulQ8IsaTest, Q6_KAtTheIntegerEdgesEqualsTheRule) {
  IsaGuard restore;
  ASSERT_TRUE(backend_cpu_select_isa(GetParam()).is_ok());
  const GgmlType t = GgmlType::kQ6_K;
  const int64_t k = 2 * 256, n = 24, row_bytes = 2 * 210;
  std::vector<uint8_t> w(n * row_bytes);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t sb = 0; sb < 2; ++sb) {
      uint8_t* blk = w.data() + j * row_bytes + sb * 210;
      // Column j: all quants 0 (even j) or 63 (odd j): ql nibbles and qh bits all clear or all set.
      std::memset(blk, j % 2 ? 0xff : 0x00, 192);
      for (int s = 0; s < 16; ++s) blk[192 + s] = static_cast<uint8_t>((j / 2 + s) % 3 == 0 ? 0x7f : 0x80);
      const uint16_t one = 0x3c00;  // f16 1.0
      std::memcpy(blk + 208, &one, 2);
    }
  expect_the_rule_at_full_scale(GetParam(), t, w, row_bytes, k, n, 16);
}

// The layout laid out at load is what prefill reads (more than four rows),
// and decode too for q4_K, q6_K, q5_0 and q8_0 (their k8 records); decode of the other
// types reads the file's blocks: B's layout passed with A's blocks gives
// B's product where the layout is read and A's where it is not. Off (or
// under f32), there is no layout.
void check_layout_is_read(const std::string& isa, GgmlType t) {
  IsaGuard restore;
  ASSERT_TRUE(backend_cpu_select_isa(isa).is_ok());
  const uint32_t id = static_cast<uint32_t>(t);
  const auto tr = *ggml_type_traits(id);
  // Four 32-element blocks, or one K super-block of eight.
  const int64_t k = tr.block_elems == 256 ? 256 : 4 * 32, n = 48,
                row_bytes = k / tr.block_elems * tr.block_bytes;
  std::mt19937 rng(5 + id);
  const auto wa = random_matrix(rng, t, n, k, row_bytes), wb = random_matrix(rng, t, n, k, row_bytes);
  const QuantMatrix qa{id, wa.data(), row_bytes, n, k}, qb{id, wb.data(), row_bytes, n, k};
  auto off = backend_cpu_init({.n_threads = 1, .act_quant = ActQuant::kQ8});
  auto f32 = backend_cpu_init({.n_threads = 1, .act_quant = ActQuant::kF32, .prepack_weights = true});
  auto on = backend_cpu_init({.n_threads = 1, .act_quant = ActQuant::kQ8, .prepack_weights = true});
  EXPECT_EQ(off->prepare_weights(qb).layout, nullptr);
  EXPECT_EQ(f32->prepare_weights(qb).layout, nullptr);
  const PreparedWeights laid = on->prepare_weights(qb);
  if (isa == "scalar") {
    EXPECT_EQ(laid.layout, nullptr);
    return;
  }
  ASSERT_NE(laid.layout, nullptr);
  QuantMatrix mixed = qa;
  mixed.layout = laid.layout.get();
  for (int64_t m : {2, 8, 16}) {
    const auto x = random_vec(rng, m * k);
    std::vector<float> ya(m * n), yb(m * n), y(m * n);
    off->matmul_quant(x.data(), qa, ya.data(), m);
    off->matmul_quant(x.data(), qb, yb.data(), m);
    on->matmul_quant(x.data(), mixed, y.data(), m);
    ASSERT_NE(ya, yb);
    const bool decode_reads_layout =
        t == GgmlType::kQ4_K || t == GgmlType::kQ6_K || t == GgmlType::kQ5_0 || t == GgmlType::kQ8_0;
    EXPECT_EQ(y, m <= 4 && !decode_reads_layout ? ya : yb) << isa << " " << tr.name << " m=" << m;
  }
}

TEST_P(MatmulQ8IsaTest, PrefillReadsTheLayoutLaidOutAtLoad) {
  for (GgmlType t : kTypes) check_layout_is_read(GetParam(), t);
}

// The kernel entry itself (backend/cpu/matmul_q8.h), below the backend's
// slicing (which starts every slice on a 16-column group when a layout is
// passed): a slice that starts off the layout's groups builds its own
// panels, with the same bits as without the layout.
TEST_P(MatmulQ8IsaTest, ASliceOffTheLayoutsGroupsBuildsItsOwnPanels) {
  IsaGuard restore;
  ASSERT_TRUE(backend_cpu_select_isa(GetParam()).is_ok());
  const GgmlType t = GgmlType::kQ4_1;
  const uint32_t id = static_cast<uint32_t>(t);
  const int64_t k = 2 * 32, n = 56, row_bytes = 2 * 20, m = 9;
  std::mt19937 rng(8);
  const auto w = random_matrix(rng, t, n, k, row_bytes);
  const QuantMatrix qm{id, w.data(), row_bytes, n, k};
  const std::shared_ptr<const cpu::Q8Panel> panel = cpu::q8_prepack(qm);
  if (GetParam() == "scalar") {
    EXPECT_EQ(panel, nullptr);
    return;
  }
  ASSERT_NE(panel, nullptr);
  QuantMatrix qp = qm;
  qp.layout = panel.get();
  const auto x = random_vec(rng, m * k);
  cpu::Q8Acts a;
  cpu::q8_resize(a, m, k);
  cpu::q8_quantize_rows(x.data(), a, 0, m);
  for (int64_t n0 : {0, 8, 24}) {
    std::vector<float> want(m * n, 0.0f), got(m * n, 0.0f);
    cpu::q8_gemm_rows(a, qm, want.data(), n, n0, n, false);
    cpu::q8_gemm_rows(a, qp, got.data(), n, n0, n, false);
    EXPECT_EQ(got, want) << GetParam() << " n0=" << n0;
  }
}

// The activations' 8-bit blocks are the same on every ISA as on scalar:
// the integers, the scale, both sums and d * sum, bit for bit. Blocks of
// every magnitude, all-zero and all -0 blocks, subnormals beside a 1.0, a
// block of subnormals alone and one of values near 1e-38 (1 / d overflows:
// zeros), a block with one large value. (Outside the rule: NaN or inf in a
// block, whose rounded quotients scalar cannot convert.)
TEST_P(MatmulQ8IsaTest, QuantizedActivationsEqualScalars) {
  IsaGuard restore;
  const int64_t m = 7, k = 5 * 32;
  std::mt19937 rng(11);
  std::vector<float> x = random_vec(rng, m * k);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t b = 0; b < k / 32; ++b) {
      float* xb = &x[r * k + b * 32];
      const float scale = std::ldexp(1.0f, int(r * 5 + b) % 40 - 20);
      for (int e = 0; e < 32; ++e) xb[e] *= scale;
    }
  std::fill_n(&x[1 * k], 32, 0.0f);
  std::fill_n(&x[1 * k + 32], 32, -0.0f);
  for (int e = 0; e < 31; ++e) x[2 * k + e] = std::ldexp(float(e) - 16.0f, -140);  // subnormals
  x[2 * k + 31] = 1.0f;
  for (int e = 0; e < 32; ++e) x[2 * k + 32 + e] *= 1e-30f;  // tiny, yet 1 / d is finite
  x[3 * k + 77] = 3.0e38f;
  for (int e = 0; e < 32; ++e) x[4 * k + e] = std::ldexp(float(e) - 16.0f, -140);  // subnormals alone
  for (int e = 0; e < 32; ++e) x[4 * k + 32 + e] = 1e-38f * (float(e) - 15.5f) / 16.0f;
  auto quantize = [&](const char* isa) {
    EXPECT_TRUE(backend_cpu_select_isa(isa).is_ok()) << isa;
    cpu::Q8Acts a;
    cpu::q8_resize(a, m, k);
    cpu::q8_quantize_rows(x.data(), a, 0, m);
    return a;
  };
  const cpu::Q8Acts want = quantize("scalar"), got = quantize(GetParam().c_str());
  auto bytes = [](const auto& v) {
    std::vector<uint8_t> out(v.size() * sizeof(v[0]));
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  };
  EXPECT_EQ(bytes(got.q), bytes(want.q));
  EXPECT_EQ(bytes(got.d), bytes(want.d));
  EXPECT_EQ(bytes(got.qsum), bytes(want.qsum));
  EXPECT_EQ(bytes(got.qlo), bytes(want.qlo));
  EXPECT_EQ(bytes(got.s), bytes(want.s));
  for (int e = 0; e < 64; ++e) EXPECT_EQ(want.q[4 * k + e], 0) << e;  // the two tiny blocks
}

// A matrix with no blocks (k = 0) lays out without dividing by its block
// count (the panels' row prefetch spreads its bytes over the blocks).
TEST_P(MatmulQ8IsaTest, AMatrixWithoutBlocksLaysOut) {
  IsaGuard restore;
  ASSERT_TRUE(backend_cpu_select_isa(GetParam()).is_ok());
  const uint8_t none = 0;
  const QuantMatrix qm{static_cast<uint32_t>(GgmlType::kQ4_0), &none, 0, 17, 0};
  const std::shared_ptr<const cpu::Q8Panel> panel = cpu::q8_prepack(qm);
  EXPECT_EQ(panel == nullptr, GetParam() == "scalar");
}

// decode_only (the output matrix, under --prepack-weights): q4_K and q6_K
// in the file's blocks get their decode records and no panels, the other
// types nothing; decode reads the records and prefill builds its own
// panels, with the bits of no layout at all.
TEST_P(MatmulQ8IsaTest, ADecodeOnlyLayoutHoldsTheDecodeRecordsAlone) {
  IsaGuard restore;
  ASSERT_TRUE(backend_cpu_select_isa(GetParam()).is_ok());
  auto be = backend_cpu_init({.n_threads = 2, .act_quant = ActQuant::kQ8, .prepack_weights = true});
  auto f32 = backend_cpu_init({.n_threads = 2, .act_quant = ActQuant::kF32, .prepack_weights = true});
  for (GgmlType t : {GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ5_0, GgmlType::kQ8_0, GgmlType::kQ4_1}) {
    const uint32_t id = static_cast<uint32_t>(t);
    const auto tr = *ggml_type_traits(id);
    const int64_t k = 512, n = 45, row_bytes = k / tr.block_elems * tr.block_bytes;
    std::mt19937 rng(11 + id);
    const auto w = random_matrix(rng, t, n, k, row_bytes);
    const QuantMatrix qm{id, w.data(), row_bytes, n, k};
    const PreparedWeights laid = be->prepare_weights(qm, /*decode_only=*/true);
    EXPECT_EQ(f32->prepare_weights(qm).layout, nullptr);  // f32 products read the file's blocks
    const bool k8 = t != GgmlType::kQ4_1 && GetParam() != "scalar";
    ASSERT_EQ(laid.layout != nullptr, k8) << tr.name;
    if (k8) {
      const int64_t per_record = t == GgmlType::kQ4_K   ? 1184
                                 : t == GgmlType::kQ6_K ? 1680
                                 : t == GgmlType::kQ5_0 ? 176
                                                        : 272;
      const int64_t unit = t == GgmlType::kQ4_K || t == GgmlType::kQ6_K ? 256 : 32;
      EXPECT_EQ(laid.bytes, (n + 7) / 8 * (k / unit) * per_record) << tr.name;
    }
    QuantMatrix qp = qm;
    qp.layout = laid.layout.get();
    for (int64_t m : {1, 3, 8}) {
      const auto x = random_vec(rng, m * k);
      std::vector<float> want(m * n), got(m * n);
      be->matmul_quant(x.data(), qm, want.data(), m);
      be->matmul_quant(x.data(), qp, got.data(), m);
      EXPECT_EQ(got, want) << GetParam() << " " << tr.name << " m=" << m;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, MatmulQ8IsaTest, ::testing::ValuesIn(available_isas()), [](const auto& info) {
  std::string name = info.param;  // amx-emulated -> amx_emulated (gtest names)
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
});

// A layout laid out for one ISA's kernels is not read by another's (the
// ISA is chosen before work starts, but a test or a bench may switch): each
// builds its own panels then, with the same bits. One case per ordered pair
// of the SIMD q8 ISAs this CPU runs; a CPU with one of them (AVX2 only) has
// no pair, so the suite is not instantiated there rather than skipped.
std::vector<std::pair<std::string, std::string>> simd_isa_pairs() {
  std::vector<std::string> simd;
  for (const std::string& isa : available_isas())
    if (isa == "avx2" || isa == "avxvnni" || isa == "avx512") simd.push_back(isa);
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const std::string& from : simd)
    for (const std::string& to : simd)
      if (from != to) pairs.emplace_back(from, to);
  return pairs;
}

class MatmulQ8IsaPairTest : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(MatmulQ8IsaPairTest);

TEST_P(MatmulQ8IsaPairTest, AnotherIsasLayoutIsNotRead) {
  IsaGuard restore;
  const auto& [from, to] = GetParam();
  const GgmlType t = GgmlType::kQ8_0;
  const uint32_t id = static_cast<uint32_t>(t);
  const int64_t k = 3 * 32, n = 40, row_bytes = 3 * 34;
  std::mt19937 rng(6);
  const auto w = random_matrix(rng, t, n, k, row_bytes);
  const QuantMatrix qm{id, w.data(), row_bytes, n, k};
  auto be = backend_cpu_init({.n_threads = 1, .act_quant = ActQuant::kQ8, .prepack_weights = true});
  const auto x = random_vec(rng, 9 * k);
  ASSERT_TRUE(backend_cpu_select_isa(from).is_ok());
  const PreparedWeights laid = be->prepare_weights(qm);
  ASSERT_NE(laid.layout, nullptr) << from;
  QuantMatrix qp = qm;
  qp.layout = laid.layout.get();
  // Read back on the ISA that laid it out, then on the other one.
  for (const std::string& run_on : {from, to}) {
    ASSERT_TRUE(backend_cpu_select_isa(run_on).is_ok());
    std::vector<float> want(9 * n), got(9 * n);
    be->matmul_quant(x.data(), qm, want.data(), 9);
    be->matmul_quant(x.data(), qp, got.data(), 9);
    EXPECT_EQ(got, want) << "laid out on " << from << ", run on " << run_on;
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, MatmulQ8IsaPairTest, ::testing::ValuesIn(simd_isa_pairs()), [](const auto& info) {
  return info.param.first + "_to_" + info.param.second;
});

// The kernels this process may run are exactly those the CPU's flags allow
// (the OS's view, /proc/cpuinfo), and auto takes the last of them.
TEST(MatmulQ8Isa, AvailableIsWhatTheCpuFlagsSay) {
  std::ifstream f("/proc/cpuinfo");
  ASSERT_TRUE(f) << "no /proc/cpuinfo";
  std::set<std::string> flags;
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    for (std::string w; words >> w;) flags.insert(w);
    break;
  }
  auto has = [&](std::initializer_list<const char*> names) {
    return std::all_of(names.begin(), names.end(), [&](const char* n) { return flags.count(n) > 0; });
  };
  std::vector<std::string> want = {"scalar"};
  if (has({"avx2", "fma"})) want.push_back("avx2");
  if (has({"avx2", "fma", "avx_vnni"})) want.push_back("avxvnni");
  if (has({"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni"})) {
    want.push_back("avx512");
    want.push_back("amx-emulated");  // the amx kernel with software tiles
    // Linux 5.16+ grants the tile state on request; an older kernel would
    // fail this line, which is the point: AMX is then unused.
    if (has({"amx_tile", "amx_int8"})) want.push_back("amx");
  }
  const std::vector<std::string> got = available_isas();
  EXPECT_EQ(got, want);
  // auto: the best but amx (opt-in: no faster than avx512 where measured) and the emulation
  std::string best = "scalar";
  for (const std::string& isa : want)
    if (isa != "amx" && isa != "amx-emulated") best = isa;
  EXPECT_EQ(backend_cpu_isa(), best);
  for (const char* name : {"avxvnni", "avx512", "amx"}) {
    if (std::find(got.begin(), got.end(), name) == got.end())
      std::printf("not tested on this CPU (it lacks it): the %s kernels\n", name);
  }
}

TEST(MatmulQ8Isa, BadChoicesAreErrorsThatNameWhatIsAvailable) {
  IsaGuard restore;
  const std::string before = backend_cpu_isa();
  for (const char* name : {"amx512", "sse2", ""}) {
    const Status st = backend_cpu_select_isa(name);
    ASSERT_FALSE(st.is_ok()) << name;
    EXPECT_NE(st.message().find("--isa"), std::string::npos) << st.message();
    EXPECT_EQ(backend_cpu_isa(), before) << name;  // unchanged
  }
  EXPECT_NE(backend_cpu_select_isa("avx1024").message().find("available here: scalar"), std::string::npos);
  ASSERT_TRUE(backend_cpu_select_isa("auto").is_ok());
  ASSERT_TRUE(backend_cpu_select_isa("scalar").is_ok());  // every build and CPU
  EXPECT_STREQ(backend_cpu_isa(), "scalar");
}

// matmul_quant_pair (k/v, gate/up: one pass, the activations rounded once)
// gives two matmul_quant calls' bits, in both activation modes, for any
// row and thread count, mixed types and widths included.
TEST_P(MatmulQ8Test, PairEqualsTwoProducts) {
  const GgmlType t = GetParam();
  const uint32_t id = static_cast<uint32_t>(t);
  const auto tr = *ggml_type_traits(id);
  const uint32_t other = static_cast<uint32_t>(t == GgmlType::kQ8_0 ? GgmlType::kQ4_1 : GgmlType::kQ8_0);
  const auto tr2 = *ggml_type_traits(other);
  std::mt19937 rng(7 + id);
  const int64_t k = tr.block_elems == 256 ? 256 : 96;
  const int64_t ra = k / tr.block_elems * tr.block_bytes, rb = k / tr2.block_elems * tr2.block_bytes;
  for (int64_t na : {8, 37, 200}) {
    const int64_t nb = na + 11;
    const auto wa = random_matrix(rng, t, na, k, ra);
    const auto wb = random_matrix(rng, static_cast<GgmlType>(other), nb, k, rb);
    const QuantMatrix qa{id, wa.data(), ra, na, k}, qb{other, wb.data(), rb, nb, k};
    for (ActQuant aq : {ActQuant::kF32, ActQuant::kQ8}) {
      for (int threads : {1, 2, 3}) {
        auto be = backend_cpu_init({.n_threads = threads, .act_quant = aq});
        for (int64_t m : {1, 4, 13}) {
          const auto x = random_vec(rng, m * k);
          std::vector<float> a1(m * na), b1(m * nb), a2(m * na, 1.0f), b2(m * nb, 1.0f);
          be->matmul_quant(x.data(), qa, a1.data(), m);
          be->matmul_quant(x.data(), qb, b1.data(), m);
          be->matmul_quant_pair(x.data(), qa, a2.data(), qb, b2.data(), m);
          const std::string where = std::string(tr.name) + " na=" + std::to_string(na) +
                                    " m=" + std::to_string(m) + " threads=" + std::to_string(threads) +
                                    (aq == ActQuant::kQ8 ? " q8" : " f32");
          EXPECT_EQ(a2, a1) << where;
          EXPECT_EQ(b2, b1) << where;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, MatmulQ8Test, ::testing::ValuesIn(kTypes), [](const auto& info) {
  return std::string(ggml_type_traits(static_cast<uint32_t>(info.param))->name);
});

// Every block type the f32 path reads (backend_cpu_reads_packed) has a q8
// path too, and no other type claims one: no matrix of a q8 run silently
// keeps f32 activations.
TEST(MatmulQ8, EveryQuantizedTypeHasAQ8Path) {
  int with = 0;
  for (uint32_t id = 0; id < 64; ++id) {
    EXPECT_EQ(cpu::q8_supports(id), backend_cpu_reads_packed(id)) << "type " << id;
    with += cpu::q8_supports(id);
  }
  EXPECT_EQ(with, static_cast<int>(std::size(kTypes)));
}

}  // namespace
}  // namespace agentkv
