// matmul_quant against an independent reference: the format module's
// dequantize_row (itself checked bit for bit against the gguf Python package
// in tests/unit/format) followed by a double-precision product.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "format/ggml_type.h"
#include "quant_helpers.h"
#include "test_helpers.h"

namespace agentkv {
namespace {

using test::all_close;
using test::random_vec;
using test::random_matrix;

std::vector<double> reference(GgmlType t, const std::vector<uint8_t>& w, int64_t row_bytes,
                              const std::vector<float>& x, const std::vector<float>& y0, int64_t m, int64_t k,
                              int64_t n, bool accumulate) {
  std::vector<float> wf(n * k);
  for (int64_t j = 0; j < n; ++j) {
    Status st = dequantize_row(t, w.data() + j * row_bytes, wf.data() + j * k, k);
    EXPECT_TRUE(st.is_ok());
  }
  std::vector<double> y(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = accumulate ? y0[i * n + j] : 0.0;
      for (int64_t l = 0; l < k; ++l) s += double(x[i * k + l]) * wf[j * k + l];
      y[i * n + j] = s;
    }
  return y;
}

const GgmlType kTypes[] = {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0,
                           GgmlType::kQ5_1, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

struct Case {
  int64_t k_blocks, n;
  int64_t pad;  // bytes of padding after each row
};

class MatmulQuantTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(MatmulQuantTest, MatchesDequantizedReference) {
  const GgmlType t = GetParam();
  const uint32_t id = static_cast<uint32_t>(t);
  const auto tr = *ggml_type_traits(id);
  auto be1 = backend_cpu_init({.n_threads = 1});
  auto be2 = backend_cpu_init({.n_threads = 2});
  ASSERT_TRUE(be1->supports_quant(id)) << tr.name;
  std::mt19937 rng(1234 + id);
  // n = 1, 7, 37, 301 are not multiples of the 8-row thread slices; with 576
  // elements of a 32-block type (612+ bytes a row) the m = 5 rows run over
  // several L2 tiles of ~107 rows.
  std::vector<Case> cases = {{1, 1, 0}, {1, 7, 0}, {3, 37, 5}, {2, 64, 0}};
  if (tr.block_elems == 32) cases.push_back({18, 301, 0});
  for (const Case& c : cases) {
    const int64_t k = c.k_blocks * tr.block_elems, n = c.n;
    const int64_t row_bytes = c.k_blocks * tr.block_bytes + c.pad;
    const auto w = random_matrix(rng, t, n, k, row_bytes);
    const QuantMatrix qm{id, w.data(), row_bytes, n, k};
    for (int64_t m : {1, 2, 3, 5}) {
      for (bool accumulate : {false, true}) {
        const auto x = random_vec(rng, m * k);
        const auto y0 = random_vec(rng, m * n);
        const auto want = reference(t, w, row_bytes, x, y0, m, k, n, accumulate);
        auto y1 = y0, y2 = y0;
        be1->matmul_quant(x.data(), qm, y1.data(), m, accumulate);
        be2->matmul_quant(x.data(), qm, y2.data(), m, accumulate);
        EXPECT_TRUE(all_close(y1, want, 1e-5))
            << tr.name << " m=" << m << " k=" << k << " n=" << n << " acc=" << accumulate;
        // Splitting rows over threads must not change any output's arithmetic.
        EXPECT_EQ(y1, y2) << tr.name << " m=" << m << " k=" << k << " n=" << n;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, MatmulQuantTest, ::testing::ValuesIn(kTypes), [](const auto& info) {
  return std::string(ggml_type_traits(static_cast<uint32_t>(info.param))->name);
});

TEST(MatmulQuant, SupportsOnlyItsBlockTypes) {
  auto be = backend_cpu_init({.n_threads = 1});
  for (GgmlType t : kTypes) EXPECT_TRUE(be->supports_quant(static_cast<uint32_t>(t)));
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_1, GgmlType::kQ2_K,
                     GgmlType::kQ3_K, GgmlType::kQ8_K})
    EXPECT_FALSE(be->supports_quant(static_cast<uint32_t>(t))) << ggml_type_name(static_cast<uint32_t>(t));
  EXPECT_FALSE(be->supports_quant(77));
}

TEST(MatmulQuant, UnsupportedTypeOrRaggedRowGivesNaNNotGarbage) {
  auto be = backend_cpu_init({.n_threads = 2});
  std::vector<uint8_t> w(64);
  std::vector<float> x(40, 1.0f), y(2, 0.0f);
  be->matmul_quant(x.data(), QuantMatrix{77, w.data(), 34, 2, 32}, y.data(), 1);
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]));
  y = {0.0f, 0.0f};
  be->matmul_quant(x.data(), QuantMatrix{static_cast<uint32_t>(GgmlType::kQ8_0), w.data(), 34, 2, 40},
                   y.data(), 1);
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]));
}

}  // namespace
}  // namespace agentkv
