// The f16 and bf16 KV cache (KvLayerView::dtype) against the f32 one: kv_write
// stores each value rounded to nearest even (the format's own f32_to_fp16 /
// f32_to_bf16), and every kernel that reads the cache (attention, its fused
// column sums, attention_colsum, kv_copy_rotate) gives bit for bit what it
// gives over an f32 cache holding the same rounded values. Attention itself
// is checked against double precision in attention_test.cpp; here the only
// question is whether reading another dtype changes anything but the input.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "backend/backend.h"
#include "format/fp16.h"
#include "test_helpers.h"

namespace agentkv {
namespace {

using test::random_vec;

// One paged cache in f32 and in a 16-bit dtype, the f32 one holding the
// 16-bit values widened.
struct Pools {
  int32_t kv_heads, head_dim, block_size, n_blocks;
  KvDType dtype;
  std::vector<float> k32, v32;
  std::vector<uint16_t> k16, v16;

  int64_t width() const { return int64_t(kv_heads) * head_dim; }
  int64_t stride() const { return int64_t(block_size) * width(); }
  KvLayerView view32() { return {k32.data(), v32.data(), stride(), block_size, kv_heads, head_dim, KvDType::kF32}; }
  KvLayerView view16() { return {k16.data(), v16.data(), stride(), block_size, kv_heads, head_dim, dtype}; }
  float widen(uint16_t h) const { return dtype == KvDType::kF16 ? fp16_to_f32(h) : bf16_to_f32(h); }
  uint16_t narrow(float f) const { return dtype == KvDType::kF16 ? f32_to_fp16(f) : f32_to_bf16(f); }
  void sync_from_16() {
    for (size_t i = 0; i < k16.size(); ++i) k32[i] = widen(k16[i]), v32[i] = widen(v16[i]);
  }
};

// Fills both pools through kv_write: every slot of every block.
Pools make_pools(backend_i& be, KvDType dtype, int32_t kv_heads, int32_t head_dim, int32_t bs, int32_t n_blocks,
                 std::mt19937& rng) {
  Pools p{kv_heads, head_dim, bs, n_blocks, dtype, {}, {}, {}, {}};
  const size_t n = size_t(p.stride()) * n_blocks;
  p.k32.assign(n, 0.0f), p.v32.assign(n, 0.0f), p.k16.assign(n, 0), p.v16.assign(n, 0);
  const int64_t slots = int64_t(bs) * n_blocks;
  // Values over many binades, some below f16's normals.
  std::vector<float> k = random_vec(rng, size_t(slots * p.width()), -3.0f, 3.0f);
  std::vector<float> v = random_vec(rng, size_t(slots * p.width()), -3.0f, 3.0f);
  for (size_t i = 0; i < k.size(); i += 97) k[i] *= 30.0f;
  for (size_t i = 5; i < v.size(); i += 89) v[i] *= 1e-6f;
  std::vector<int64_t> slot(slots);
  std::iota(slot.begin(), slot.end(), 0);
  be.kv_write(p.view16(), k.data(), v.data(), slot.data(), slots);
  for (size_t i = 0; i < k.size(); ++i) {
    EXPECT_EQ(p.k16[i], p.narrow(k[i])) << "K element " << i << " = " << k[i];
    EXPECT_EQ(p.v16[i], p.narrow(v[i])) << "V element " << i << " = " << v[i];
    if (::testing::Test::HasFailure()) break;
  }
  p.sync_from_16();
  return p;
}

// Rounding edge cases through the SIMD and scalar paths (a row of 8 + 5):
// overflow, ties, subnormals, signed zero and infinity.
TEST(KvDtypeWrite, RoundsEveryValueAsTheFormatDoes) {
  auto be = backend_cpu_init({.n_threads = 1});
  const float vals[13] = {65504.0f, 65520.0f, 1e5f, -1e5f, 6e-8f, 2.9e-8f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f,
                          -0.0f, 3e-6f, INFINITY, -INFINITY, 1.0f + 0x1p-8f + 0x1p-9f};
  for (KvDType t : {KvDType::kF16, KvDType::kBF16}) {
    std::vector<uint16_t> k(13), v(13);
    KvLayerView kv{k.data(), v.data(), 13, 1, 1, 13, t};
    const int64_t slot = 0;
    be->kv_write(kv, vals, vals, &slot, 1);
    for (int i = 0; i < 13; ++i) {
      const uint16_t want = t == KvDType::kF16 ? f32_to_fp16(vals[i]) : f32_to_bf16(vals[i]);
      EXPECT_EQ(k[i], want) << kv_dtype_name(t) << " " << vals[i];
      EXPECT_EQ(v[i], want) << kv_dtype_name(t) << " " << vals[i];
    }
  }
}

class KvDtype : public ::testing::TestWithParam<std::tuple<KvDType, int>> {
 protected:
  KvDType dtype() const { return std::get<0>(GetParam()); }
  int threads() const { return std::get<1>(GetParam()); }
  std::mt19937 rng_{77};
};

// Decode rows and prefill rows of sequences on shuffled blocks, with fused
// column sums on some rows; head_dim 64 (SmolLM2) and 20 (scalar tails).
TEST_P(KvDtype, AttentionEqualsTheF32CacheOfTheRoundedValues) {
  auto be = backend_cpu_init({.n_threads = threads()});
  for (int32_t D : {64, 20}) {
    SCOPED_TRACE("head_dim " + std::to_string(D));
    const int32_t n_heads = 9, kv_heads = 3, bs = 16, n_blocks = 12;
    Pools p = make_pools(*be, dtype(), kv_heads, D, bs, n_blocks, rng_);
    // Sequence 0: 70 keys on blocks 7,2,9,0,5; rows 0..69 (prefill).
    // Sequence 1: 100 keys on the other blocks; one decode row at 99.
    std::vector<int32_t> block_ids = {7, 2, 9, 0, 5, 1, 3, 4, 6, 8, 10, 11};
    std::vector<int32_t> block_indptr = {0, 5, 12}, row_indptr = {0, 70, 71}, row_pos(71);
    std::iota(row_pos.begin(), row_pos.begin() + 70, 0);
    row_pos[70] = 99;
    std::vector<int32_t> colsum_slot(71, -1);
    colsum_slot[69] = 0, colsum_slot[70] = 1;
    const int64_t colsum_stride = 100;
    AttentionPlan plan{2, row_indptr.data(), row_pos.data(), block_indptr.data(), block_ids.data()};
    plan.colsum_slot = colsum_slot.data();
    plan.colsum_stride = colsum_stride;
    const auto q = random_vec(rng_, size_t(71) * n_heads * D, -2.0f, 2.0f);
    const float scale = 1.0f / std::sqrt(float(D));
    std::vector<float> out16(q.size()), out32(q.size()), cs16(2 * kv_heads * colsum_stride, 0.0f), cs32 = cs16;
    plan.colsum = cs16.data();
    be->attention(plan, q.data(), n_heads, p.view16(), scale, out16.data());
    plan.colsum = cs32.data();
    be->attention(plan, q.data(), n_heads, p.view32(), scale, out32.data());
    EXPECT_EQ(0, std::memcmp(out16.data(), out32.data(), sizeof(float) * out16.size()));
    EXPECT_EQ(0, std::memcmp(cs16.data(), cs32.data(), sizeof(float) * cs16.size()));

    // attention_colsum over sequence 1 from three of its positions.
    const std::vector<int32_t> qp = {10, 57, 99};
    std::vector<float> c16(100), c32(100);
    be->attention_colsum(q.data(), qp.data(), 3, n_heads, block_ids.data() + 5, 7, 100, p.view16(), scale, c16.data());
    be->attention_colsum(q.data(), qp.data(), 3, n_heads, block_ids.data() + 5, 7, 100, p.view32(), scale, c32.data());
    EXPECT_EQ(c16, c32);
  }
}

// Flash-LoRA-Attention's fused and expand paths read V_base from the cache,
// and the LR rows from the LR cache, which holds them in the same dtype.
// Ranks 8 and 16 take the LR rows along in P·V's pass when their dtype is
// V's, rank 24 (and LR rows of another dtype) in a pass of their own: the
// comparisons across dtypes below also hold the two passes to the same
// arithmetic, bit for bit.
TEST_P(KvDtype, FlashLoraAttentionEqualsTheF32Cache) {
  auto be = backend_cpu_init({.n_threads = threads()});
  const int32_t n_heads = 9, kv_heads = 3, D = 64, bs = 16, n_blocks = 4;
  Pools p = make_pools(*be, dtype(), kv_heads, D, bs, n_blocks, rng_);
  for (const int32_t rank : {8, 16, 24}) {
    SCOPED_TRACE(testing::Message() << "rank " << rank);
    const std::vector<float> lr = random_vec(rng_, size_t(n_blocks) * bs * rank);
    // The LR rows rounded, and the f32 rows holding the rounded values.
    std::vector<uint16_t> lr16(lr.size());
    std::vector<float> lr32(lr.size());
    for (size_t i = 0; i < lr.size(); ++i) lr16[i] = p.narrow(lr[i]), lr32[i] = p.widen(lr16[i]);
    const std::vector<float> b = random_vec(rng_, size_t(kv_heads) * D * rank, -0.1f, 0.1f);
    std::vector<int32_t> block_ids = {3, 1, 0, 2}, block_indptr = {0, 4}, row_indptr = {0, 2},
                         row_pos = {40, 63};
    const float* bs_ptr[] = {b.data()};
    const int32_t ranks[] = {rank};
    const float scales[] = {2.0f};
    const auto q = random_vec(rng_, size_t(2) * n_heads * D, -2.0f, 2.0f);
    for (auto path : {LrAttention::Path::kFused, LrAttention::Path::kExpand}) {
      LrAttention lra{lr.data(), int64_t(bs) * rank, rank, block_indptr.data(), block_ids.data(), bs_ptr,
                      ranks,     scales,             path};
      AttentionPlan plan{1, row_indptr.data(), row_pos.data(), block_indptr.data(), block_ids.data()};
      plan.lr = &lra;
      std::vector<float> out16(q.size()), out32(q.size());
      be->attention(plan, q.data(), n_heads, p.view16(), 0.125f, out16.data());
      be->attention(plan, q.data(), n_heads, p.view32(), 0.125f, out32.data());
      EXPECT_EQ(0, std::memcmp(out16.data(), out32.data(), sizeof(float) * out16.size()))
          << (path == LrAttention::Path::kFused ? "fused" : "expand");
      // 16-bit LR rows read as the f32 rows of their values.
      LrAttention lra16 = lra, lra32 = lra;
      lra16.lr = lr16.data(), lra16.dtype = dtype();
      lra32.lr = lr32.data();
      plan.lr = &lra16;
      be->attention(plan, q.data(), n_heads, p.view16(), 0.125f, out16.data());
      plan.lr = &lra32;
      be->attention(plan, q.data(), n_heads, p.view16(), 0.125f, out32.data());
      EXPECT_EQ(0, std::memcmp(out16.data(), out32.data(), sizeof(float) * out16.size()))
          << (path == LrAttention::Path::kFused ? "fused" : "expand") << ", 16-bit LR rows";
    }
  }
}

// A moved K is the rotated widened K, rounded again; V moves bit for bit.
TEST_P(KvDtype, CopyRotateRoundsTheRotatedF32Row) {
  auto be = backend_cpu_init({.n_threads = threads()});
  const int32_t kv_heads = 3, D = 64, bs = 16, n_blocks = 4;
  Pools p = make_pools(*be, dtype(), kv_heads, D, bs, n_blocks, rng_);
  RopeParams rp;
  rp.rot_dim = D;
  const std::vector<int64_t> src = {0, 5, 17, 30}, dst = {40, 41, 60, 63};
  const std::vector<int32_t> delta = {3, -7, 0, 1000};
  be->kv_copy_rotate(p.view16(), src.data(), dst.data(), delta.data(), 4, rp);
  be->kv_copy_rotate(p.view32(), src.data(), dst.data(), delta.data(), 4, rp);
  const int64_t w = p.width();
  for (size_t i = 0; i < dst.size(); ++i) {
    const int64_t at = (dst[i] / bs) * p.stride() + (dst[i] % bs) * w;
    for (int64_t e = 0; e < w; ++e) {
      ASSERT_EQ(p.k16[at + e], p.narrow(p.k32[at + e])) << "slot " << dst[i] << " element " << e;
      ASSERT_EQ(p.v16[at + e], p.narrow(p.v32[at + e])) << "slot " << dst[i] << " element " << e;
      ASSERT_EQ(p.widen(p.v16[at + e]), p.v32[at + e]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, KvDtype,
                         ::testing::Combine(::testing::Values(KvDType::kF16, KvDType::kBF16), ::testing::Values(1, 2)),
                         [](const auto& info) {
                           return std::string(kv_dtype_name(std::get<0>(info.param))) + "_threads" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace agentkv
