// The runner executes a Step: a varlen, layer-by-layer forward over all token
// rows of a batch, with attention for each row over its sequence's block
// table. It is the only place where the model, the KV storage and the backend
// kernels meet, and where adapters (LoRA weights per row) meet the kernels:
// rows name an adapter of Step::adapters, and after each of the seven base
// linears the runner adds each adapter's LoRA delta to its rows. It knows
// nothing of sharing schemes: which rows write K/V is the Step's business.
#pragma once

#include <memory>
#include <vector>

#include "adapter/adapter.h"
#include "backend/backend.h"
#include "kv/kv_storage.h"
#include "model/weights.h"
#include "runtime/step.h"
#include "util/status.h"

namespace agentkv {

class Runner {
 public:
  Runner(std::shared_ptr<const Model> model, backend_i* backend, KvStorage* kv);

  // Runs the step; logits of the rows marked `logits` are written in row order
  // to `logits` ([n_logit_rows, n_vocab]). Validates the step against the
  // model and the KV storage first (token ids, slots, block tables, adapter
  // indexes and shapes); a bad step is an error and computes nothing.
  Status execute(const Step& step, std::vector<float>* logits);

  const Model& model() const { return *model_; }

 private:
  Status validate(const Step& step) const;
  Status validate_adapter(const Adapter& a) const;
  // Groups the rows by adapter (groups_), once per step.
  void plan_adapters(const Step& step);
  // y[r] += LoRA delta of module t for every adapter row r (x: (R, k), y: (R, n)).
  void apply_lora(int layer, LoraTarget t, const float* x, int64_t k, float* y, int64_t n);
  // y[R, n] = x[R, k] · w^T (+ y): the packed weights where the backend reads them.
  void linear(const float* x, const DenseTensor& w, float* y, int64_t R, int64_t k, int64_t n, bool accumulate = false);
  void layer_forward(int layer, int64_t n_rows, const AttentionPlan& plan);

  std::shared_ptr<const Model> model_;
  backend_i* backend_;
  KvStorage* kv_;
  RopeParams rope_;

  // Scratch, grown to the largest step seen. Shapes for R rows:
  std::vector<float> x_;      // (R, d_model) residual stream
  std::vector<float> h_;      // (R, d_model) normed input
  std::vector<float> q_;      // (R, n_heads * head_dim)
  std::vector<float> k_;      // (R, kv_dim)
  std::vector<float> v_;      // (R, kv_dim)
  std::vector<float> att_;    // (R, n_heads * head_dim)
  std::vector<float> gate_;   // (R, ffn_dim)
  std::vector<float> up_;     // (R, ffn_dim)
  std::vector<int32_t> row_pos_, row_indptr_, block_indptr_, block_ids_;
  std::vector<int64_t> slots_;

  // The rows of one adapter in the current step (ascending row indexes).
  struct AdapterGroup {
    const Adapter* adapter = nullptr;
    std::vector<int32_t> rows;     // every row of the adapter: q, o, gate, up, down
    std::vector<int32_t> kv_rows;  // those writing K/V (slot >= 0): k, v. Other rows' K/V is never read.
  };
  std::vector<AdapterGroup> groups_;  // one per Step::adapters entry; empty groups are skipped
};

}  // namespace agentkv
