// OpenBLAS wrapper. Debian ships the pthread variant (libopenblas0-pthread):
// its thread count is process-global, set with openblas_set_num_threads.
#if defined(AGENTKV_GEMM_OPENBLAS)
#include <cblas.h>

#include "backend/cpu/gemm.h"

namespace agentkv::cpu {

void sgemm_nt_openblas(const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k, int64_t ldy,
                       float beta) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), 1.0f, x, static_cast<blasint>(k), w, static_cast<blasint>(k), beta, y,
              static_cast<blasint>(ldy));
}

void gemm_threads_openblas(int n) { openblas_set_num_threads(n); }

}  // namespace agentkv::cpu
#endif
