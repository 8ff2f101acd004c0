// The runner executes a Step: a varlen, layer-by-layer forward over all token
// rows of a batch, with attention for each row over its sequence's block
// table. It is the only place where the model, the KV storage and the backend
// kernels meet, and where adapters (LoRA weights per row) meet the kernels:
// rows name an adapter of Step::adapters, and after each of the seven base
// linears the runner adds each adapter's LoRA delta to its rows. It knows
// nothing of sharing schemes: which rows run in which layers, which write
// K/V, and which a hook drops are the Step's business (docs/design.md §2).
//
// Layer by layer it keeps the rows active there compacted in row order: a
// row joins at its layer_begin (from the embedding or an injected hidden
// state) and leaves at its layer_end or when a hook drops it. Attention of
// the active queries covers each sequence's whole block table, cached and
// fresh entries alike. When every row runs every layer nothing is ever
// compacted, and the arithmetic is the dense forward's, bit for bit.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "adapter/adapter.h"
#include "backend/backend.h"
#include "kv/kv_storage.h"
#include "kv/lr_storage.h"
#include "model/weights.h"
#include "runtime/step.h"
#include "util/aligned_vector.h"
#include "util/status.h"

namespace agentkv {

class Runner {
 public:
  Runner(std::shared_ptr<const Model> model, backend_i* backend, KvStorage* kv);
  // LRAgent's LR cache (steps with Step::seq_lr need it), and whether
  // attention reads it with Flash-LoRA-Attention (true) or over V expanded
  // per step (the reference the benchmarks compare against).
  void set_lr_storage(LrStorage* lr, bool flash_lora = true) {
    lr_ = lr;
    flash_lora_ = flash_lora;
  }

  // Runs the step; logits of the rows marked `logits` are written in row order
  // to `logits` ([n_logit_rows, n_vocab]). Validates the step against the
  // model and the KV storage first (token ids, slots, block tables, adapter
  // indexes and shapes); a bad step is an error and computes nothing.
  Status execute(const Step& step, std::vector<float>* logits);
  // The same, with captures and counters.
  Status execute(const Step& step, StepOutput* out);

  const Model& model() const { return *model_; }
  // Bytes of the backend's own layouts of the layer weights, made at
  // construction (backend_i::prepare_weights; 0 when it keeps none).
  int64_t prepared_weight_bytes() const { return prepared_bytes_; }

 private:
  Status validate(const Step& step) const;
  Status validate_seqs(const Step& step) const;
  Status validate_row(const Step& step, const TokenRow& row) const;
  Status validate_hooks_and_copies(const Step& step) const;
  Status validate_lr(const Step& step) const;
  Status validate_adapter(const Adapter& a) const;
  // Groups the rows by adapter (groups_), once per step.
  void plan_adapters(const Step& step);
  // y[r] += LoRA delta of module t for every adapter row r (x: (R, k), y: (R, n)).
  void apply_lora(int layer, LoraTarget t, const float* x, int64_t k, float* y, int64_t n);
  // y[R, n] = x[R, k] · w^T (+ y): the packed weights where the backend reads them.
  void linear(const float* x, const DenseTensor& w, float* y, int64_t R, int64_t k, int64_t n, bool accumulate = false);
  // linear for two matrices of one input (k/v, gate/up), as one backend pass
  // where both are packed: the same bits as two linear calls.
  void linear_pair(const float* x, int64_t R, int64_t k, const DenseTensor& wa, float* ya, int64_t na,
                   const DenseTensor& wb, float* yb, int64_t nb);
  // dst[d_model] = the token's embedding row, from the f32 copy or the packed blocks.
  void embed(int32_t token, float* dst) const;
  // execute's stages, in order.
  void apply_copies(const Step& step);
  void plan_rows(const Step& step, StepOutput* out);
  void run_layers(const Step& step, StepOutput* out);
  void output_logits(const Step& step, StepOutput* out);
  // Makes `want` (Step row indexes, ascending) the active rows: continuing
  // rows keep their residual, joining rows take the embedding or their
  // injected hidden state; the attention plan and adapter groups follow.
  void set_active(const Step& step, const std::vector<int32_t>& want);
  void rebuild_plan(const Step& step);
  // Runs the layer's hooks between the K/V write and attention; drops rows.
  void run_hooks(const Step& step, int layer);
  void hook_colsums(const Step& step, const LayerHook& h, int32_t c_begin, const KvLayerView& kv,
                    HookView* view);
  void compact_active(const Step& step);
  void layer_forward(const Step& step, int layer, StepOutput* out);
  // RelayCaching's influence: the attention op also sums, for the active
  // rows with TokenRow::influence, the probability mass each key receives
  // (AttentionPlan::colsum, fused in the attention pass); collect adds it
  // to their sequences' StepOutput::influence.
  void plan_influence(const Step& step);
  void collect_influence(const Step& step, StepOutput* out);
  // LRAgent: writes X·A^T of the LR rows to the LR cache at `layer`, and
  // points plan_.lr at the sequences' low-rank V parts for attention.
  void write_lr(int layer);
  void plan_lr(const Step& step, int layer);
  // The slots the active rows write K/V to at `layer` (TokenRow::write_mask).
  const int64_t* write_slots(const Step& step, int layer);
  // K and V (LoRA, bias, k norm, RoPE) of the compact rows kv_rows_, into
  // the first rows of k_ and v_, with their slots in kv_slots_.
  void project_kv(int layer, const int64_t* wslots);

  std::shared_ptr<const Model> model_;
  backend_i* backend_;
  // The backend's layouts of the layer matrices, by their packed bytes.
  std::unordered_map<const uint8_t*, std::shared_ptr<const void>> layouts_;
  int64_t prepared_bytes_ = 0;
  QuantMatrix quant_matrix(const DenseTensor& w, int64_t n, int64_t k) const;
  KvStorage* kv_;
  LrStorage* lr_ = nullptr;
  bool flash_lora_ = true;
  // RoPE of the global layers and of the sliding-window ones (Gemma 3: its
  // own base), by layer.
  RopeParams rope_, rope_local_;
  const RopeParams& rope_for(int layer) const { return model_->spec.is_local(layer) ? rope_local_ : rope_; }
  // The attention block's output projection (+ its LoRA) into the residual
  // stream, through post_attention_norm where the model has one; likewise the FFN's.
  void residual_out(int layer, const DenseTensor& w, const DenseTensor& post_norm, LoraTarget t, const float* in,
                    int64_t k, int64_t R);

  // Scratch, grown to the largest step seen, 64-byte aligned (util/
  // aligned_vector.h). Shapes for R rows:
  AlignedVector<float> x_;      // (R, d_model) residual stream
  AlignedVector<float> h_;      // (R, d_model) normed input
  AlignedVector<float> q_;      // (R, n_heads * head_dim)
  AlignedVector<float> k_;      // (R, kv_dim)
  AlignedVector<float> v_;      // (R, kv_dim)
  AlignedVector<float> att_;    // (R, n_heads * head_dim)
  AlignedVector<float> gate_;   // (R, ffn_dim)
  AlignedVector<float> up_;     // (R, ffn_dim)
  AlignedVector<float> xn_;     // (R, d_model) the residual stream while re-compacting
  std::vector<int32_t> row_pos_, row_indptr_, block_indptr_, block_ids_;
  std::vector<int64_t> slots_;
  std::vector<int64_t> slots_lr_;      // per active row: TokenRow::lr_slot
  // The active rows whose K/V a layer computes, their slots and positions,
  // their normed inputs when gathered, and each active row's index among them.
  std::vector<int32_t> kv_rows_, kv_pos_, kv_pos_of_, lora_rows_;
  std::vector<int64_t> kv_slots_;
  AlignedVector<float> hk_;
  std::vector<int64_t> masked_slots_;  // slots_ at one layer, with TokenRow::write_mask applied
  bool any_mask_ = false;
  // LRAgent: per Step sequence its LR block table (CSR) and, per layer, its
  // v_proj B, rank and scale; the LR rows' X·A^T before the write.
  std::vector<int32_t> lr_indptr_, lr_ids_, lr_rank_;
  std::vector<const float*> lr_b_;
  std::vector<float> lr_scale_;
  LrAttention lr_plan_;
  bool any_lr_ = false;
  AlignedVector<float> lr_t_;
  std::vector<float> lr_row_;  // one LR row before it is stored
  std::vector<int32_t> lr_rows_tmp_;
  AttentionPlan plan_;

  // Active rows (Step row indexes, ascending); compact index i is active_[i].
  std::vector<int32_t> active_;
  std::vector<int32_t> want_;
  std::vector<int32_t> row_seq_;    // sequence of each Step row
  std::vector<int32_t> row_end_;    // resolved layer_end of each Step row
  std::vector<uint8_t> dropped_;    // a hook dropped the row
  std::vector<int32_t> capture_at_; // each Step row's index in StepOutput::captures, or -1
  // Hook scratch: cached K/V of the hooked rows, their keep flags, colsums.
  AlignedVector<float> hook_k_, hook_v_, hook_q_, colsum_;
  bool any_influence_ = false;
  std::vector<int32_t> influence_slot_;  // per active row: its colsum line, or -1
  std::vector<float> influence_buf_;     // [slots, kv_heads, stride]
  std::vector<int32_t> hook_pos_, hook_blocks_;
  std::vector<uint8_t> keep_;
  std::vector<int64_t> copy_src_, copy_dst_;
  std::vector<int32_t> copy_delta_;

  // The rows of one adapter among the active rows (ascending compact indexes).
  struct AdapterGroup {
    const Adapter* adapter = nullptr;
    std::vector<int32_t> rows;     // every row of the adapter: q, o, gate, up, down
    std::vector<int32_t> kv_rows;  // those writing K/V (slot >= 0): k. Other rows' K/V is never read.
    std::vector<int32_t> v_rows;   // kv_rows outside LR sequences: v (an LR sequence's v_proj LoRA is its LR cache)
    std::vector<int32_t> lr_rows;  // rows with an LR slot: X·A^T of v_proj to the LR cache
  };
  std::vector<AdapterGroup> groups_;  // one per Step::adapters entry; empty groups are skipped
};

}  // namespace agentkv
