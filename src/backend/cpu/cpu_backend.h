// The CPU implementation of backend_i: f32 kernels, one op per file
// (matmul.cpp, matmul_quant.cpp on packed GGUF weights, rms_norm.cpp,
// rope.cpp, rope_delta.cpp, swiglu.cpp, add.cpp, kv_write.cpp,
// kv_copy_rotate.cpp, attention.cpp, attention_colsum.cpp, lora.cpp),
// parallelised over the backend's own ThreadPool. Every product runs the
// hand-written kernels in the canonical reduction order of dot_tile.h (batch
// invariance); the BLAS wrappers of gemm.h remain for microbench/gemm_bench.cpp
// only.
//
// Not thread-safe: one caller at a time (the runner), like ThreadPool.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/matmul_q8.h"
#include "backend/cpu/rope_table.h"
#include "util/thread_pool.h"

namespace agentkv {

class CpuBackend final : public backend_i {
 public:
  explicit CpuBackend(const BackendConfig& cfg);

  std::string name() const override;
  int n_threads() const override { return pool_.size(); }

  void matmul(const float* x, const float* w, float* y, int64_t m, int64_t k, int64_t n,
              bool accumulate = false) override;
  void rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps) override;
  void rope(float* x, const int32_t* row_pos, int64_t rows, int32_t n_heads, int32_t head_dim,
            const RopeParams& p) override;
  void rope_delta(float* x, const int32_t* delta, int64_t rows, int32_t n_heads, int32_t head_dim,
                  const RopeParams& p) override;
  void swiglu(const float* gate, const float* up, float* out, int64_t n) override;
  void geglu(const float* gate, const float* up, float* out, int64_t n) override;  // swiglu.cpp
  bool supports_quant(uint32_t type) const override;  // matmul_quant.cpp
  PreparedWeights prepare_weights(const QuantMatrix& w, bool decode_only = false) override;  // matmul_quant.cpp
  void matmul_quant(const float* x, const QuantMatrix& w, float* y, int64_t m, bool accumulate = false) override;
  void matmul_quant_pair(const float* x, const QuantMatrix& a, float* ya, const QuantMatrix& b, float* yb,
                         int64_t m) override;
  void add(const float* x, float* y, int64_t n) override;
  void kv_write(const KvLayerView& kv, const float* k_rows, const float* v_rows, const int64_t* slots,
                int64_t rows) override;
  void kv_copy_rotate(const KvLayerView& kv, const int64_t* src_slots, const int64_t* dst_slots,
                      const int32_t* delta, int64_t n, const RopeParams& p) override;
  void attention(const AttentionPlan& plan, const float* q, int32_t n_heads, const KvLayerView& kv,
                 float scale, float* out) override;
  void attention_colsum(const float* q, const int32_t* q_pos, int64_t n_q, int32_t n_heads,
                        const int32_t* blocks, int32_t n_blocks, int32_t n_keys, const KvLayerView& kv,
                        float scale, float* colsum, int32_t window = 0) override;
  void lora(const float* x, int64_t k, const LoraView& w, const int32_t* rows, int64_t n_rows, float* y,
            int64_t n) override;  // lora.cpp
  void lora_down(const float* x, int64_t k, const float* a, int32_t rank, const int32_t* rows, int64_t n_rows,
                 float* t) override;  // lora.cpp

 private:
  // Runs fn(begin, end) over [0, n) in chunks of at least `grain` items, on one
  // thread when the work is too small to pay for waking the pool.
  template <typename Fn>
  void parallel_for(int64_t n, int64_t grain, Fn&& fn);

  ThreadPool pool_;
  ActQuant act_quant_;
  bool prepack_weights_;
  cpu::Q8Acts q8_x_;  // matmul_quant's activations when act_quant_ is kQ8
  // cos/sin by position, reused while the RoPE parameters stay the same; two,
  // for models whose layers alternate between two sets (Gemma 3's local and
  // global layers), picked by rope_table() in rope.cpp.
  cpu::RopeTable rope_tables_[2];
  int rope_table_last_ = 0;
  cpu::RopeTable& rope_table(const RopeParams& p, int64_t max_pos);
  // lora.cpp scratch, grown to the largest call seen:
  std::vector<float> lora_x_;  // (n_rows, k)    gathered input rows
  std::vector<float> lora_t_;  // (n_rows, rank) scale · x · A^T
  std::vector<float> lora_y_;  // (n_rows, n)    delta before the scatter-add
  // attention.cpp, Flash-LoRA-Attention's expand path: per sequence its V
  // rows expanded, kept across calls so a layer does not fault pages in.
  std::vector<std::vector<float>> lr_vexp_;
  // attention.cpp: the per-chunk partials of rows split along the keys, and
  // their tile probabilities when column sums are asked for.
  std::vector<float> attn_part_, attn_hist_;
  // attention_colsum.cpp scratch: (batch, kv_heads, n_keys) per-item attention rows.
  std::vector<float> colsum_rows_;
};

template <typename Fn>
void CpuBackend::parallel_for(int64_t n, int64_t grain, Fn&& fn) {
  if (n <= 0) return;
  int64_t chunks = grain > 0 ? (n + grain - 1) / grain : n;
  if (pool_.size() == 1 || chunks <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  pool_.parallel_for(n, [&](int64_t b, int64_t e, int) { fn(b, e); });
}

}  // namespace agentkv
