#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kv_convert.h"

namespace agentkv {

// A negative slot skips the row (padding rows, or rows whose cached K/V is
// kept rather than overwritten). Rows are rounded to the cache's dtype.
void CpuBackend::kv_write(const KvLayerView& kv, const float* k_rows, const float* v_rows,
                          const int64_t* slots, int64_t rows) {
  const int64_t width = int64_t(kv.kv_heads) * kv.head_dim;
  parallel_for(rows, 256, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      int64_t slot = slots[r];
      if (slot < 0) continue;
      int64_t off = (slot / kv.block_size) * kv.block_stride + (slot % kv.block_size) * width;
      cpu::kv_from_f32(kv.dtype, k_rows + r * width, cpu::kv_elem(kv.k, kv.dtype, off), width);
      cpu::kv_from_f32(kv.dtype, v_rows + r * width, cpu::kv_elem(kv.v, kv.dtype, off), width);
    }
  });
}

}  // namespace agentkv
