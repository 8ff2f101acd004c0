// Copy of cached K/V entries to new slots with K rotated by a position delta
// (KvStore segment moves; SparseX's fused copy-and-align, docs/scheme_algorithms.md §2.1
// step 2). The K row is copied and then rotated in place by the rotation of
// rope_delta, so the moved K is bit for bit what rope_delta makes of it
// (with an f16/bf16 cache: of the widened row, rounded back).
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kv_convert.h"
#include "backend/cpu/rope_rotate.h"

namespace agentkv {

void CpuBackend::kv_copy_rotate(const KvLayerView& kv, const int64_t* src_slots, const int64_t* dst_slots,
                                const int32_t* delta, int64_t n, const RopeParams& p) {
  const int64_t width = int64_t(kv.kv_heads) * kv.head_dim;
  auto offset = [&](int64_t slot) {
    return (slot / kv.block_size) * kv.block_stride + (slot % kv.block_size) * width;
  };
  const size_t row_bytes = size_t(width) * kv_dtype_bytes(kv.dtype);
  parallel_for(n, 64, [&](int64_t b, int64_t e) {
    cpu::RopeDeltaRotator rot(p);
    std::vector<float> k(width);
    for (int64_t i = b; i < e; ++i) {
      const int64_t src = offset(src_slots[i]), dst = offset(dst_slots[i]);
      std::memcpy(cpu::kv_elem(kv.v, kv.dtype, dst), cpu::kv_elem(kv.v, kv.dtype, src), row_bytes);
      cpu::kv_to_f32(kv.dtype, cpu::kv_elem(kv.k, kv.dtype, src), k.data(), width);
      rot.rotate_row(k.data(), kv.kv_heads, kv.head_dim, delta[i]);
      cpu::kv_from_f32(kv.dtype, k.data(), cpu::kv_elem(kv.k, kv.dtype, dst), width);
    }
  });
}

}  // namespace agentkv
