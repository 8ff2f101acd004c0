#include "runtime/runner.h"

#include <cmath>
#include <cstring>

namespace agentkv {

Runner::Runner(std::shared_ptr<const Model> model, backend_i* backend, KvStorage* kv)
    : model_(std::move(model)), backend_(backend), kv_(kv) {
  const ModelSpec& s = model_->spec;
  rope_.style = s.rope_style;
  rope_.rot_dim = s.rope_dim;
  rope_.freq_base = s.rope_freq_base;
  rope_.freq_scale = s.rope_freq_scale;
  rope_.freq_factors = model_->w.rope_freqs.empty() ? nullptr : model_->w.rope_freqs.f32();
}

void Runner::linear(const float* x, const DenseTensor& w, float* y, int64_t R, int64_t k, int64_t n,
                    bool accumulate) {
  // Packed weights serve every row count (the kernels' reduction order does
  // not depend on it), so the f32 copy is only for types the backend cannot
  // read packed.
  if (!w.packed.empty() && backend_->supports_quant(w.packed_type)) {
    QuantMatrix q{w.packed_type, w.packed.data(), w.packed_row_bytes, n, k};
    backend_->matmul_quant(x, q, y, R, accumulate);
  } else {
    backend_->matmul(x, w.f32(), y, R, k, n, accumulate);
  }
}

Status Runner::validate_adapter(const Adapter& a) const {
  const ModelSpec& s = model_->spec;
  if (static_cast<int64_t>(a.layers.size()) != s.n_layers) {
    return make_error(ErrorCode::kInvalidArgument, "adapter '", a.name, "' has ", a.layers.size(),
                      " layers, the model has ", s.n_layers);
  }
  // (d_in, d_out) of each target, in LoraTarget order.
  const int64_t dims[kLoraTargetCount][2] = {{s.d_model, s.q_dim()},  {s.d_model, s.kv_dim()},
                                             {s.d_model, s.kv_dim()}, {s.q_dim(), s.d_model},
                                             {s.d_model, s.ffn_dim},  {s.d_model, s.ffn_dim},
                                             {s.ffn_dim, s.d_model}};
  static const char* const names[kLoraTargetCount] = {"q_proj",    "k_proj", "v_proj",   "o_proj",
                                                      "gate_proj", "up_proj", "down_proj"};
  for (size_t l = 0; l < a.layers.size(); ++l) {
    for (int32_t t = 0; t < kLoraTargetCount; ++t) {
      const LoraMatrix& m = a.layers[l].m[t];
      if (m.rank == 0) continue;
      const int64_t r = m.rank;
      if (r < 0 || m.d_in != dims[t][0] || m.d_out != dims[t][1] || static_cast<int64_t>(m.a.size()) != r * m.d_in ||
          static_cast<int64_t>(m.b.size()) != m.d_out * r) {
        return make_error(ErrorCode::kInvalidArgument, "adapter '", a.name, "' layer ", l, " ", names[t], ": rank ",
                          m.rank, ", ", m.d_in, " -> ", m.d_out, " with A of ", m.a.size(), " and B of ", m.b.size(),
                          " floats does not fit the model's ", dims[t][0], " -> ", dims[t][1]);
      }
    }
  }
  return Status::ok();
}

Status Runner::validate(const Step& step) const {
  const ModelSpec& s = model_->spec;
  const KvGeometry& g = kv_->geometry();
  const int64_t n_rows = static_cast<int64_t>(step.rows.size());
  for (size_t i = 0; i < step.adapters.size(); ++i) {
    if (step.adapters[i] == nullptr) return make_error(ErrorCode::kInvalidArgument, "step adapter ", i, " is null");
    AKV_RETURN_IF_ERROR(validate_adapter(*step.adapters[i]));
  }
  int32_t expect_begin = 0;
  for (const StepSeq& q : step.seqs) {
    if (q.row_begin != expect_begin || q.row_end < q.row_begin || q.row_end > n_rows) {
      return make_error(ErrorCode::kInternal, "step sequences must cover the rows contiguously");
    }
    expect_begin = q.row_end;
    for (int32_t b : q.blocks) {
      if (b < 0 || b >= kv_->n_blocks()) return make_error(ErrorCode::kInternal, "block id ", b, " out of range");
    }
    const int64_t capacity = static_cast<int64_t>(q.blocks.size()) * g.block_size;
    for (int32_t r = q.row_begin; r < q.row_end; ++r) {
      const TokenRow& row = step.rows[r];
      if (row.pos < 0 || row.pos >= capacity) {
        return make_error(ErrorCode::kInternal, "row position ", row.pos, " outside its block table");
      }
      // The row's own K/V must land where attention will read position pos;
      // a negative slot writes nothing (the K/V at pos comes from another row).
      const int64_t want = int64_t{q.blocks[row.pos / g.block_size]} * g.block_size + row.pos % g.block_size;
      if (row.slot >= 0 && row.slot != want) {
        return make_error(ErrorCode::kInternal, "row slot does not match its block table");
      }
    }
  }
  if (expect_begin != n_rows) return make_error(ErrorCode::kInternal, "rows not covered by step sequences");
  for (const TokenRow& row : step.rows) {
    if (row.token < 0 || row.token >= s.n_vocab) {
      return make_error(ErrorCode::kInvalidArgument, "token id ", row.token, " outside the vocabulary (", s.n_vocab, ")");
    }
    if (row.adapter < -1 || row.adapter >= static_cast<int64_t>(step.adapters.size())) {
      return make_error(ErrorCode::kInvalidArgument, "row adapter index ", row.adapter, " outside the step's ",
                        step.adapters.size(), " adapters");
    }
  }
  return Status::ok();
}

void Runner::plan_adapters(const Step& step) {
  groups_.resize(step.adapters.size());
  for (size_t i = 0; i < step.adapters.size(); ++i) {
    groups_[i].adapter = step.adapters[i];
    groups_[i].rows.clear();
    groups_[i].kv_rows.clear();
  }
  for (size_t r = 0; r < step.rows.size(); ++r) {
    const TokenRow& row = step.rows[r];
    if (row.adapter < 0) continue;
    AdapterGroup& g = groups_[row.adapter];
    g.rows.push_back(static_cast<int32_t>(r));
    if (row.slot >= 0) g.kv_rows.push_back(static_cast<int32_t>(r));
  }
}

void Runner::apply_lora(int layer, LoraTarget t, const float* x, int64_t k, float* y, int64_t n) {
  const bool kv_module = t == LoraTarget::kK || t == LoraTarget::kV;
  for (const AdapterGroup& g : groups_) {
    const std::vector<int32_t>& rows = kv_module ? g.kv_rows : g.rows;
    if (rows.empty()) continue;
    const LoraMatrix& m = g.adapter->layers[layer].at(t);
    if (m.empty()) continue;
    backend_->lora(x, k, LoraView{m.a.data(), m.b.data(), m.rank, m.scale}, rows.data(),
                   static_cast<int64_t>(rows.size()), y, n);
  }
}

Status Runner::execute(const Step& step, std::vector<float>* logits) {
  AKV_RETURN_IF_ERROR(validate(step));
  const ModelSpec& s = model_->spec;
  const int64_t R = static_cast<int64_t>(step.rows.size());
  if (R == 0) return Status::ok();

  x_.resize(R * s.d_model);
  h_.resize(R * s.d_model);
  q_.resize(R * s.q_dim());
  k_.resize(R * s.kv_dim());
  v_.resize(R * s.kv_dim());
  att_.resize(R * s.q_dim());
  gate_.resize(R * s.ffn_dim);
  up_.resize(R * s.ffn_dim);

  // Plan once per step (FlashInfer's plan/run split): every layer reuses it.
  row_pos_.resize(R);
  slots_.resize(R);
  row_indptr_.assign(1, 0);
  block_indptr_.assign(1, 0);
  block_ids_.clear();
  for (const StepSeq& q : step.seqs) {
    row_indptr_.push_back(q.row_end);
    block_ids_.insert(block_ids_.end(), q.blocks.begin(), q.blocks.end());
    block_indptr_.push_back(static_cast<int32_t>(block_ids_.size()));
  }
  const float* embd = model_->w.tok_embd.f32();
  for (int64_t r = 0; r < R; ++r) {
    row_pos_[r] = step.rows[r].pos;
    slots_[r] = step.rows[r].slot;
    std::memcpy(&x_[r * s.d_model], embd + int64_t{step.rows[r].token} * s.d_model, sizeof(float) * s.d_model);
  }
  plan_adapters(step);
  AttentionPlan plan;
  plan.n_seqs = static_cast<int32_t>(step.seqs.size());
  plan.row_indptr = row_indptr_.data();
  plan.row_pos = row_pos_.data();
  plan.block_indptr = block_indptr_.data();
  plan.block_ids = block_ids_.data();

  for (int l = 0; l < s.n_layers; ++l) layer_forward(l, R, plan);

  // Final norm and output projection, only for rows that want logits.
  const int32_t n_out = step.n_logit_rows();
  int64_t j = 0;
  for (int64_t r = 0; r < R; ++r) {
    if (!step.rows[r].logits) continue;
    if (j != r) std::memcpy(&x_[j * s.d_model], &x_[r * s.d_model], sizeof(float) * s.d_model);
    ++j;
  }
  logits->resize(int64_t{n_out} * s.n_vocab);
  if (n_out == 0) return Status::ok();
  backend_->rms_norm(x_.data(), model_->w.output_norm.f32(), h_.data(), n_out, s.d_model, s.norm_eps);
  linear(h_.data(), model_->output_weight(), logits->data(), n_out, s.d_model, s.n_vocab);
  return Status::ok();
}

void Runner::layer_forward(int layer, int64_t R, const AttentionPlan& plan) {
  const ModelSpec& s = model_->spec;
  const LayerWeights& w = model_->w.layers[layer];
  backend_i& be = *backend_;
  const int64_t qd = s.q_dim(), kvd = s.kv_dim();

  // Attention block: x += Wo · attn(rope(Wq h), rope(Wk h), Wv h), h = norm(x).
  // Each adapter's LoRA delta goes onto the Linear's output before anything
  // else (PEFT: the bias belongs to the base Linear, and x·W^T + b + delta is
  // the merged x·(W + scale·B·A)^T + b), so before q/k norm and RoPE.
  be.rms_norm(x_.data(), w.attn_norm.f32(), h_.data(), R, s.d_model, s.norm_eps);
  linear(h_.data(), w.wq, q_.data(), R, s.d_model, qd);
  apply_lora(layer, LoraTarget::kQ, h_.data(), s.d_model, q_.data(), qd);
  linear(h_.data(), w.wk, k_.data(), R, s.d_model, kvd);
  apply_lora(layer, LoraTarget::kK, h_.data(), s.d_model, k_.data(), kvd);
  linear(h_.data(), w.wv, v_.data(), R, s.d_model, kvd);
  apply_lora(layer, LoraTarget::kV, h_.data(), s.d_model, v_.data(), kvd);
  if (!w.bq.empty()) {
    for (int64_t r = 0; r < R; ++r) {
      be.add(w.bq.f32(), &q_[r * qd], qd);
      be.add(w.bk.f32(), &k_[r * kvd], kvd);
      be.add(w.bv.f32(), &v_[r * kvd], kvd);
    }
  }
  if (!w.q_norm.empty()) {  // qwen3: RMSNorm over each head before RoPE
    be.rms_norm(q_.data(), w.q_norm.f32(), q_.data(), R * s.n_heads, s.head_dim, s.norm_eps);
    be.rms_norm(k_.data(), w.k_norm.f32(), k_.data(), R * s.n_kv_heads, s.head_dim, s.norm_eps);
  }
  be.rope(q_.data(), row_pos_.data(), R, s.n_heads, s.head_dim, rope_);
  be.rope(k_.data(), row_pos_.data(), R, s.n_kv_heads, s.head_dim, rope_);
  KvLayerView kv = kv_->layer_view(layer);
  be.kv_write(kv, k_.data(), v_.data(), slots_.data(), R);
  be.attention(plan, q_.data(), s.n_heads, kv, 1.0f / std::sqrt(static_cast<float>(s.head_dim)), att_.data());
  // Wo accumulates into the residual stream, and so does its LoRA delta.
  linear(att_.data(), w.wo, x_.data(), R, qd, s.d_model, /*accumulate=*/true);
  apply_lora(layer, LoraTarget::kO, att_.data(), qd, x_.data(), s.d_model);

  // Feed-forward block: x += W_down · (silu(W_gate h) * W_up h), h = norm(x).
  be.rms_norm(x_.data(), w.ffn_norm.f32(), h_.data(), R, s.d_model, s.norm_eps);
  linear(h_.data(), w.w_gate, gate_.data(), R, s.d_model, s.ffn_dim);
  apply_lora(layer, LoraTarget::kGate, h_.data(), s.d_model, gate_.data(), s.ffn_dim);
  linear(h_.data(), w.w_up, up_.data(), R, s.d_model, s.ffn_dim);
  apply_lora(layer, LoraTarget::kUp, h_.data(), s.d_model, up_.data(), s.ffn_dim);
  be.swiglu(gate_.data(), up_.data(), gate_.data(), R * s.ffn_dim);
  linear(gate_.data(), w.w_down, x_.data(), R, s.ffn_dim, s.d_model, /*accumulate=*/true);
  apply_lora(layer, LoraTarget::kDown, gate_.data(), s.ffn_dim, x_.data(), s.d_model);
}

}  // namespace agentkv
