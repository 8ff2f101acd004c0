// Paged attention gives the same bits on every instruction set the process
// can choose (`--isa`, issue 31): where it is avx512, q·K, each tile's
// softmax and P·V run on 512-bit vectors (backend/cpu/attention_wide.h),
// elsewhere on the AVX2 kernels of attention.cpp, and each output element
// must run the same chain of fused multiply-adds on both. Checked bit for bit against avx2's output
// for f32, f16 and bf16 caches, head dims 64 (four 16-lane vectors per pass)
// and 96 (a pass of two), GQA ratios 3, 1 and 6 (P·V's six-query group),
// rows in one key chunk and past it, and 1 and 2 threads. Keys up to ±60 in
// one case put scores hundreds below their row's max, so the softmax's exp
// takes its flush-to-zero branch; that case also compares the column sums
// (AttentionPlan::colsum), which read the probabilities as stored. avxvnni
// takes the AVX2 kernels (equal code, still compared); amx and amx-emulated
// take the 512-bit ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "format/fp16.h"
#include "test_helpers.h"

namespace agentkv {
namespace {

using test::random_vec;

struct IsaRestore {
  ~IsaRestore() { EXPECT_TRUE(backend_cpu_select_isa("auto").is_ok()); }
};

struct Shape {
  int32_t n_heads, kv_heads, head_dim;
  KvDType dtype;
  float k_range = 2.0f;  // keys in [-k_range, k_range]
  bool colsum = false;   // also RelayCaching's column sums, appended to the output
  int32_t block_size = 16;  // 7 and 1024: tiles and chunks start mid-block, or in one block
};

// One sequence of kv_len keys (blocks of s.block_size at shuffled ids) and query rows at rows_pos.
std::vector<float> run(const Shape& s, int threads, const std::vector<int32_t>& rows_pos, int32_t kv_len,
                       const char* isa) {
  EXPECT_TRUE(backend_cpu_select_isa(isa).is_ok()) << isa;
  auto be = backend_cpu_init({.n_threads = threads});
  std::mt19937 rng(7);
  const int32_t D = s.head_dim, width = s.kv_heads * D, bs = s.block_size;
  const int32_t nb = (kv_len + bs - 1) / bs;
  const int64_t stride = int64_t(bs) * width;
  const auto k = random_vec(rng, size_t(stride) * nb, -s.k_range, s.k_range),
             v = random_vec(rng, size_t(stride) * nb);
  std::vector<uint16_t> k16(k.size()), v16(v.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k16[i] = s.dtype == KvDType::kBF16 ? f32_to_bf16(k[i]) : f32_to_fp16(k[i]);
    v16[i] = s.dtype == KvDType::kBF16 ? f32_to_bf16(v[i]) : f32_to_fp16(v[i]);
  }
  std::vector<int32_t> block_ids(nb);
  std::iota(block_ids.begin(), block_ids.end(), 0);
  std::shuffle(block_ids.begin(), block_ids.end(), rng);
  const std::vector<int32_t> row_indptr = {0, int32_t(rows_pos.size())}, block_indptr = {0, nb};
  const auto q = random_vec(rng, rows_pos.size() * s.n_heads * D, -2.0f, 2.0f);
  AttentionPlan plan{1, row_indptr.data(), rows_pos.data(), block_indptr.data(), block_ids.data()};
  const bool f32 = s.dtype == KvDType::kF32;
  KvLayerView kv{f32 ? const_cast<float*>(k.data()) : static_cast<void*>(k16.data()),
                 f32 ? const_cast<float*>(v.data()) : static_cast<void*>(v16.data()),
                 stride,
                 bs,
                 s.kv_heads,
                 D,
                 s.dtype};
  // One slot per row, as the Runner gives them (rows of different work items
  // add to their own lines on different threads).
  std::vector<int32_t> slot(rows_pos.size());
  std::iota(slot.begin(), slot.end(), 0);
  std::vector<float> colsum(rows_pos.size() * s.kv_heads * kv_len, 0.0f);
  if (s.colsum) {
    plan.colsum_slot = slot.data();
    plan.colsum = colsum.data();
    plan.colsum_stride = kv_len;
  }
  std::vector<float> out(q.size(), NAN);
  be->attention(plan, q.data(), s.n_heads, kv, 1.0f / std::sqrt(float(D)), out.data());
  if (s.colsum) out.insert(out.end(), colsum.begin(), colsum.end());
  return out;
}

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

// One case per ISA other than avx2 that this CPU runs, each against avx2's
// bits. A CPU with AVX2 alone has nothing to compare, so the suite is not
// instantiated there (rather than skipped, or run comparing nothing).
std::vector<std::string> isas_beside_avx2() {
  IsaRestore restore;
  std::vector<std::string> out;
  if (!backend_cpu_select_isa("avx2").is_ok()) return out;
  for (const char* isa : {"avxvnni", "avx512", "amx-emulated", "amx"})
    if (backend_cpu_select_isa(isa).is_ok()) out.push_back(isa);
  return out;
}

class AttentionIsaTest : public ::testing::TestWithParam<std::string> {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(AttentionIsaTest);

TEST_P(AttentionIsaTest, GivesTheBitsOfTheAvx2Kernels) {
  IsaRestore restore;
  const std::string isa = GetParam();
  std::vector<int32_t> prefill(77);
  std::iota(prefill.begin(), prefill.end(), 0);
  const std::vector<int32_t> past_a_chunk = {0, 31, 32, 600, 1023, 1199};
  int compared = 0;
  for (const Shape s :
       {Shape{9, 3, 64, KvDType::kF16}, Shape{9, 3, 64, KvDType::kF32}, Shape{9, 3, 64, KvDType::kBF16},
        Shape{4, 4, 96, KvDType::kF16}, Shape{6, 1, 64, KvDType::kF16},
        Shape{9, 3, 64, KvDType::kF32, 60.0f, true}, Shape{9, 3, 64, KvDType::kF16, 2.0f, false, 7},
        Shape{9, 3, 64, KvDType::kBF16, 2.0f, false, 1024}}) {
    for (int threads : {1, 2}) {
      for (const auto& [rows, kv_len] : {std::pair{prefill, 77}, std::pair{past_a_chunk, 1200}}) {
        const auto want = run(s, threads, rows, kv_len, "avx2");
        SCOPED_TRACE(::testing::Message() << isa << " D=" << s.head_dim << " dtype=" << int(s.dtype)
                                          << " bs=" << s.block_size << " threads=" << threads
                                          << " kv_len=" << kv_len);
        const auto got = run(s, threads, rows, kv_len, isa.c_str());
        EXPECT_EQ(bits(got), bits(want));  // bit for bit: -0 and NaN payloads too
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 8 * 2 * 2);
}

INSTANTIATE_TEST_SUITE_P(Isa, AttentionIsaTest, ::testing::ValuesIn(isas_beside_avx2()), [](const auto& info) {
  std::string name = info.param;  // amx-emulated -> amx_emulated (gtest names)
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
});

}  // namespace
}  // namespace agentkv
