#include "backend/cpu/kv_convert.h"

namespace agentkv {

void kv_row_to_f32(KvDType t, const void* src, float* dst, int64_t n) { cpu::kv_to_f32(t, src, dst, n); }

}  // namespace agentkv
