// oneDNN wrapper. Debian's libdnnl is built with the OpenMP runtime and has no
// API of its own for the thread count; omp_set_num_threads is looked up at run
// time (libgomp is loaded by libdnnl) so the build needs no OpenMP flags.
#if defined(AGENTKV_GEMM_DNNL)
#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>

#include "backend/cpu/gemm.h"

namespace agentkv::cpu {

void sgemm_nt_dnnl(const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k, int64_t ldy,
                   float beta) {
  dnnl_sgemm('N', 'T', m, n, k, 1.0f, x, k, w, k, beta, y, ldy);
}

void gemm_threads_dnnl(int n) {
  using SetFn = void (*)(int);
  static SetFn set = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (set) set(n);
}

}  // namespace agentkv::cpu
#endif
