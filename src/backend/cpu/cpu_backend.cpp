#include "backend/cpu/cpu_backend.h"

#include <memory>

#include "backend/cpu/gemm.h"
#include "backend/cpu/matmul_q8.h"

namespace agentkv {

// The GEMM library runs single-threaded inside the pool (see matmul.cpp).
CpuBackend::CpuBackend(const BackendConfig& cfg)
    : pool_(cfg.n_threads), act_quant_(cfg.act_quant), prepack_weights_(cfg.prepack_weights) {
  cpu::gemm_threads(1);
}

std::string CpuBackend::name() const { return std::string("cpu-") + cpu::kGemmName; }

std::unique_ptr<backend_i> backend_cpu_init(const BackendConfig& cfg) {
  return std::make_unique<CpuBackend>(cfg);
}

Status backend_cpu_select_isa(std::string_view name) { return cpu::select_q8_isa(name); }

const char* backend_cpu_isa() { return cpu::q8_isa_name(cpu::q8_isa()); }

}  // namespace agentkv
