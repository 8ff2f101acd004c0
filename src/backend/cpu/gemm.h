// The GEMM library behind CpuBackend::matmul, chosen at configure time with
// AGENTKV_GEMM=openblas|dnnl (see docs/benchmarks_gemm.md for the measurement
// behind the default), plus the hand-written GEMV used for single-row
// (decode) products. The benchmark in microbench/ compiles both library wrappers
// into one binary, hence distinct names.
#pragma once

#include <cstdint>

namespace agentkv::cpu {

// y[m, n] (row stride ldy) = x[m, k] · w[n, k]^T + beta * y. Runs on the calling
// thread plus whatever threads the library was told to use.
void sgemm_nt_openblas(const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k, int64_t ldy,
                       float beta);
void sgemm_nt_dnnl(const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k, int64_t ldy,
                   float beta);
// The library's own thread count. OpenBLAS: global. oneDNN (OpenMP build): the
// calling thread's OpenMP setting, so call it on the thread that runs sgemm.
void gemm_threads_openblas(int n);
void gemm_threads_dnnl(int n);

// y[j] (+)= dot(x, w[j]) for j in [n0, n1): one row of x against rows of w.
void gemv_nt(const float* x, const float* w, float* y, int64_t k, int64_t n0, int64_t n1, bool accumulate);

#if defined(AGENTKV_GEMM_DNNL)
inline constexpr const char* kGemmName = "dnnl";
inline void sgemm_nt(const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k, int64_t ldy,
                     float beta) {
  sgemm_nt_dnnl(x, w, y, m, n, k, ldy, beta);
}
inline void gemm_threads(int n) { gemm_threads_dnnl(n); }
// OpenMP's thread count is per calling thread: set it on every pool thread.
inline void gemm_single_thread_here() { gemm_threads_dnnl(1); }
#else
inline constexpr const char* kGemmName = "openblas";
inline void sgemm_nt(const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k, int64_t ldy,
                     float beta) {
  sgemm_nt_openblas(x, w, y, m, n, k, ldy, beta);
}
inline void gemm_threads(int n) { gemm_threads_openblas(n); }
// OpenBLAS's thread count is global and set once (CpuBackend's constructor);
// setting it again from several threads at once would race.
inline void gemm_single_thread_here() {}
#endif

}  // namespace agentkv::cpu
