#include "backend/cpu/cpu_backend.h"

namespace agentkv {

// Residual add: memory-bound, so only large adds (prefill) use the pool.
void CpuBackend::add(const float* x, float* y, int64_t n) {
  parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] += x[i];
  });
}

}  // namespace agentkv
