// The decode layout of q4_K, q6_K, q5_0 and q8_0 (backend/cpu/k8_layout.h): the file's
// blocks come back from the records byte for byte, and a matrix held in the
// records (QuantMatrix::k8) gives the file layout's products bit for bit on
// every path: the q8 decode kernel, prefill's per-call panels, panels laid
// out at load, the scalar q8 kernels, the f32 path, products in pairs, and
// column slices that start inside a group of eight.
#include "backend/cpu/k8_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/matmul_q8.h"
#include "format/ggml_type.h"
#include "quant_helpers.h"
#include "test_helpers.h"

namespace agentkv {
namespace {

using test::random_matrix;
using test::random_vec;

constexpr GgmlType kK8Types[] = {GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ5_0, GgmlType::kQ8_0};

// (n, k) shapes for type t: q5_0's and q8_0's records are per 32-weight block, so they
// also takes k off the multiples of 256 (Gemma 3's 640, Qwen 0.5B's 896).
std::vector<std::pair<int64_t, int64_t>> shapes(GgmlType t, std::vector<std::pair<int64_t, int64_t>> all) {
  if (t == GgmlType::kQ5_0 || t == GgmlType::kQ8_0) {
    all.emplace_back(11, 32);
    all.emplace_back(19, 640);
  }
  return all;
}

struct Mat {
  std::vector<uint8_t> file;
  WeightBytes rec;
  QuantMatrix qf, qk;
};

Mat make(std::mt19937& rng, GgmlType t, int64_t n, int64_t k) {
  const uint32_t id = static_cast<uint32_t>(t);
  const auto tr = *ggml_type_traits(id);
  Mat m;
  const int64_t row_bytes = k / tr.block_elems * tr.block_bytes;
  m.file = random_matrix(rng, t, n, k, row_bytes);
  m.qf = QuantMatrix{id, m.file.data(), row_bytes, n, k};
  m.rec = backend_cpu_k8_records(m.qf);
  m.qk = m.qf;
  m.qk.data = m.rec.data();
  m.qk.k8 = true;
  return m;
}

struct IsaGuard {
  ~IsaGuard() { EXPECT_TRUE(backend_cpu_select_isa("auto").is_ok()); }
};

TEST(K8Layout, TheFileBlocksComeBackByteForByte) {
  std::mt19937 rng(21);
  for (GgmlType t : kK8Types) {
    const uint32_t id = static_cast<uint32_t>(t);
    EXPECT_TRUE(backend_cpu_k8_type(id));
    for (auto [n, k] : shapes(t, {{1, 256}, {7, 512}, {9, 256}, {37, 1536}})) {
      const Mat m = make(rng, t, n, k);
      EXPECT_EQ(static_cast<int64_t>(m.rec.size()), cpu::k8_bytes(id, n, k));
      std::vector<uint8_t> back;
      const QuantMatrix f = cpu::k8_file_rows(m.qk, 0, n, back);
      EXPECT_EQ(back, m.file) << id << " n=" << n << " k=" << k;
      EXPECT_EQ(f.row_bytes, m.qf.row_bytes);
      // A slice of rows, off the groups of eight.
      if (n > 4) {
        cpu::k8_file_rows(m.qk, 3, n - 1, back);
        EXPECT_TRUE(std::equal(back.begin(), back.end(), m.file.begin() + 3 * m.qf.row_bytes));
      }
    }
  }
  for (uint32_t other : {2u, 3u, 7u, 13u}) EXPECT_FALSE(backend_cpu_k8_type(other)) << other;
  EXPECT_EQ(backend_cpu_k8_unit(6), 32);  // q5_0
  EXPECT_EQ(backend_cpu_k8_unit(12), 256);
  EXPECT_EQ(backend_cpu_k8_unit(8), 32);  // q8_0
  EXPECT_EQ(backend_cpu_k8_unit(7), 0);
}

std::vector<std::string> isas() {
  std::vector<std::string> out;
  for (const char* name : {"scalar", "avx2", "avxvnni", "avx512", "amx-emulated", "amx"})
    if (backend_cpu_select_isa(name).is_ok()) out.push_back(name);
  EXPECT_TRUE(backend_cpu_select_isa("auto").is_ok());
  return out;
}

class K8LayoutIsaTest : public ::testing::TestWithParam<std::string> {};

TEST_P(K8LayoutIsaTest, ProductsHaveTheFileLayoutsBits) {
  IsaGuard restore;
  ASSERT_TRUE(backend_cpu_select_isa(GetParam()).is_ok());
  std::mt19937 rng(22);
  auto q1 = backend_cpu_init({.n_threads = 1, .act_quant = ActQuant::kQ8});
  auto q3 = backend_cpu_init({.n_threads = 3, .act_quant = ActQuant::kQ8});
  auto pre = backend_cpu_init({.n_threads = 2, .act_quant = ActQuant::kQ8, .prepack_weights = true});
  auto f32 = backend_cpu_init({.n_threads = 2, .act_quant = ActQuant::kF32});
  for (GgmlType t : kK8Types) {
    for (auto [n, k] : shapes(t, {{45, 512}, {7, 256}, {130, 768}})) {
      const Mat w = make(rng, t, n, k);
      // Panels laid out at load from the records (no decode records beside
      // them: the matrix is its own).
      const PreparedWeights laid = pre->prepare_weights(w.qk);
      QuantMatrix qk_pre = w.qk;
      qk_pre.layout = laid.layout.get();
      if (GetParam() != "scalar") {
        ASSERT_NE(laid.layout, nullptr);
        EXPECT_TRUE(static_cast<const cpu::Q8Panel*>(laid.layout.get())->dec.empty());
      }
      for (int64_t m : {1, 2, 3, 4, 5, 8, 17}) {
        for (bool acc : {false, true}) {
          const auto x = random_vec(rng, m * k);
          const auto y0 = random_vec(rng, m * n);
          const std::string where = std::to_string(static_cast<int>(t)) + " n=" + std::to_string(n) +
                                    " k=" + std::to_string(k) + " m=" + std::to_string(m) + " acc=" +
                                    std::to_string(acc) + " " + GetParam();
          for (backend_i* be : {q1.get(), q3.get(), pre.get(), f32.get()}) {
            auto want = y0, got = y0;
            be->matmul_quant(x.data(), w.qf, want.data(), m, acc);
            be->matmul_quant(x.data(), be == pre.get() ? qk_pre : w.qk, got.data(), m, acc);
            EXPECT_EQ(got, want) << where << (be == f32.get() ? " f32" : "");
          }
        }
        // In a pair, beside a file-layout matrix of another type.
        const Mat other = make(rng, GgmlType::kQ4_1, 9, k);
        const auto x = random_vec(rng, m * k);
        std::vector<float> wa(m * n), wb(m * 9), ga(m * n), gb(m * 9);
        for (backend_i* be : {q3.get(), f32.get()}) {
          be->matmul_quant_pair(x.data(), w.qf, wa.data(), other.qf, wb.data(), m);
          be->matmul_quant_pair(x.data(), w.qk, ga.data(), other.qf, gb.data(), m);
          EXPECT_EQ(ga, wa) << "pair m=" << m;
          EXPECT_EQ(gb, wb) << "pair m=" << m;
        }
      }
      // The kernel entry with slices that start inside a group of eight.
      for (int64_t m : {1, 3, 6}) {
        const auto x = random_vec(rng, m * k);
        cpu::Q8Acts a;
        cpu::q8_resize(a, m, k);
        cpu::q8_quantize_rows(x.data(), a, 0, m);
        for (int64_t n0 : {int64_t{0}, int64_t{3}, std::min<int64_t>(13, n - 1)}) {
          std::vector<float> want(m * n, 0.0f), got(m * n, 0.0f);
          cpu::q8_gemm_rows(a, w.qf, want.data(), n, n0, n, false);
          cpu::q8_gemm_rows(a, w.qk, got.data(), n, n0, n, false);
          EXPECT_EQ(got, want) << GetParam() << " m=" << m << " n0=" << n0;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, K8LayoutIsaTest, ::testing::ValuesIn(isas()), [](const auto& info) {
  std::string name = info.param;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
});

}  // namespace
}  // namespace agentkv
