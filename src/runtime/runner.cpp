#include "runtime/runner.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "format/ggml_type.h"

namespace agentkv {

Runner::Runner(std::shared_ptr<const Model> model, backend_i* backend, KvStorage* kv)
    : model_(std::move(model)), backend_(backend), kv_(kv) {
  const ModelSpec& s = model_->spec;
  rope_.style = s.rope_style;
  rope_.rot_dim = s.rope_dim;
  rope_.freq_base = s.rope_freq_base;
  rope_.freq_scale = s.rope_freq_scale;
  rope_.freq_factors = model_->w.rope_freqs.empty() ? nullptr : model_->w.rope_freqs.f32();
  // llama.cpp's rope_freq_base_train_swa and rope_freq_scale_train_swa (1).
  rope_local_ = rope_;
  rope_local_.freq_base = s.rope_freq_base_local;
  rope_local_.freq_scale = 1.0f;
  rope_local_.freq_factors = nullptr;
  // The layer matrices laid out once for the backend's kernels, where it
  // keeps a layout (--prepack-weights). The output matrix's products have
  // one row per sequence: it gets a decode layout only (decode_only).
  auto prepare = [&](const DenseTensor& w, bool decode_only) {
    if (w.packed.empty() || w.shape.size() != 2 || !backend_->supports_quant(w.packed_type)) return;
    PreparedWeights p = backend_->prepare_weights(quant_matrix(w, w.shape[0], w.shape[1]), decode_only);
    if (!p.layout) return;
    prepared_bytes_ += p.bytes;
    layouts_.emplace(w.packed.data(), std::move(p.layout));
  };
  for (const LayerWeights& l : model_->w.layers) {
    for (const DenseTensor* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) prepare(*w, false);
  }
  prepare(model_->output_weight(), true);
}

QuantMatrix Runner::quant_matrix(const DenseTensor& w, int64_t n, int64_t k) const {
  QuantMatrix q{w.packed_type, w.packed.data(), w.packed_row_bytes, n, k};
  q.k8 = w.k8;
  if (layouts_.empty()) return q;  // the default: no layouts, no lookup on the hot path
  if (auto it = layouts_.find(w.packed.data()); it != layouts_.end()) q.layout = it->second.get();
  return q;
}

void Runner::linear(const float* x, const DenseTensor& w, float* y, int64_t R, int64_t k, int64_t n,
                    bool accumulate) {
  // Packed weights serve every row count (the kernels' reduction order does
  // not depend on it); the f32 copy exists only for types the backend cannot
  // read packed (model_load's packed_only).
  if (!w.packed.empty() && backend_->supports_quant(w.packed_type)) {
    backend_->matmul_quant(x, quant_matrix(w, n, k), y, R, accumulate);
  } else if (!w.data.empty()) {
    backend_->matmul(x, w.f32(), y, R, k, n, accumulate);
  } else {
    // A packed-only matrix this backend cannot read: the loader was told
    // another backend's types. Loud in the output, never a crash.
    std::fill(y, y + R * n, std::numeric_limits<float>::quiet_NaN());
  }
}

void Runner::linear_pair(const float* x, int64_t R, int64_t k, const DenseTensor& wa, float* ya, int64_t na,
                         const DenseTensor& wb, float* yb, int64_t nb) {
  if (!wa.packed.empty() && !wb.packed.empty() && backend_->supports_quant(wa.packed_type) &&
      backend_->supports_quant(wb.packed_type)) {
    backend_->matmul_quant_pair(x, quant_matrix(wa, na, k), ya, quant_matrix(wb, nb, k), yb, R);
    return;
  }
  linear(x, wa, ya, R, k, na);
  linear(x, wb, yb, R, k, nb);
}

void Runner::embed(int32_t token, float* dst) const {
  // A packed-only table decodes the row to exactly what an f32 copy holds; a
  // tied table in the decode layout gives the row's file blocks back first.
  const int64_t d = model_->spec.d_model;
  const DenseTensor& t = model_->w.tok_embd;
  bool ok;
  if (t.k8) {
    ok = token >= 0 && token < t.shape[0];
    if (ok) {
      thread_local std::vector<uint8_t> blocks;
      blocks.resize(size_t(t.packed_row_bytes));
      const QuantMatrix q{t.packed_type, t.packed.data(), t.packed_row_bytes, t.shape[0], t.shape[1], nullptr, true};
      backend_cpu_k8_file_row(q, token, blocks.data());
      ok = dequantize_row(static_cast<GgmlType>(t.packed_type), blocks.data(), dst, d).is_ok();
    }
  } else {
    ok = t.row_f32(token, dst);
  }
  if (!ok) std::fill(dst, dst + d, std::numeric_limits<float>::quiet_NaN());
  if (const float c = model_->spec.embed_scale; c != 1.0f) {
    for (int64_t i = 0; i < d; ++i) dst[i] *= c;
  }
}

Status Runner::execute(const Step& step, std::vector<float>* logits) {
  StepOutput out;
  out.logits.swap(*logits);
  Status st = execute(step, &out);
  logits->swap(out.logits);
  return st;
}

void Runner::rebuild_plan(const Step& step) {
  const int64_t n = static_cast<int64_t>(active_.size());
  row_pos_.resize(n);
  slots_.resize(n);
  slots_lr_.resize(n);
  row_indptr_.assign(step.seqs.size() + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    const TokenRow& row = step.rows[active_[i]];
    row_pos_[i] = row.pos;
    slots_[i] = row.slot;
    slots_lr_[i] = row.lr_slot;
    ++row_indptr_[row_seq_[active_[i]] + 1];
  }
  for (size_t q = 0; q < step.seqs.size(); ++q) row_indptr_[q + 1] += row_indptr_[q];
  plan_.n_seqs = static_cast<int32_t>(step.seqs.size());
  plan_.row_indptr = row_indptr_.data();
  plan_.row_pos = row_pos_.data();
  plan_.block_indptr = block_indptr_.data();
  plan_.block_ids = block_ids_.data();
  plan_adapters(step);
}

void Runner::set_active(const Step& step, const std::vector<int32_t>& want) {
  const int64_t d = model_->spec.d_model;
  size_t j = 0;  // walks the old active_ (both ascending)
  for (size_t i = 0; i < want.size(); ++i) {
    const int32_t r = want[i];
    while (j < active_.size() && active_[j] < r) ++j;
    float* dst = &xn_[i * d];
    const TokenRow& row = step.rows[r];
    if (j < active_.size() && active_[j] == r) {
      std::memcpy(dst, &x_[j * d], sizeof(float) * d);
    } else if (row.layer_begin == 0) {
      embed(row.token, dst);
    } else {
      std::memcpy(dst, &step.hidden_in[int64_t{row.hidden_in} * d], sizeof(float) * d);
    }
  }
  x_.swap(xn_);
  active_ = want;
  rebuild_plan(step);
}

Status Runner::execute(const Step& step, StepOutput* out) {
  AKV_RETURN_IF_ERROR(validate(step));
  out->row_layers = 0;
  out->seq_row_layers.assign(step.seqs.size(), 0);
  out->captures.clear();
  apply_copies(step);
  if (step.rows.empty()) {
    out->logits.clear();
    return Status::ok();
  }
  plan_rows(step, out);
  run_layers(step, out);
  output_logits(step, out);
  return Status::ok();
}

// Segments found elsewhere in the cache join first, in every layer.
void Runner::apply_copies(const Step& step) {
  if (step.copies.empty()) return;
  const int64_t n = static_cast<int64_t>(step.copies.size());
  copy_src_.resize(n);
  copy_dst_.resize(n);
  copy_delta_.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    copy_src_[i] = step.copies[i].src_slot;
    copy_dst_[i] = step.copies[i].dst_slot;
    copy_delta_[i] = step.copies[i].delta;
  }
  for (int l = 0; l < model_->spec.n_layers; ++l) {
    backend_->kv_copy_rotate(kv_->layer_view(l), copy_src_.data(), copy_dst_.data(), copy_delta_.data(), n,
                             rope_for(l));
  }
}

// Scratch for the step's rows, and the per-row facts and block tables (K/V
// and LR, in CSR form) that every layer reuses (FlashInfer's plan/run split).
void Runner::plan_rows(const Step& step, StepOutput* out) {
  const ModelSpec& s = model_->spec;
  const int64_t R = static_cast<int64_t>(step.rows.size());
  // The residual stream needs room for every row (x_, xn_); the other
  // scratch holds the active rows, at most R.
  for (AlignedVector<float>* b : {&x_, &xn_, &h_}) b->resize(R * s.d_model);
  q_.resize(R * s.q_dim());
  k_.resize(R * s.kv_dim());
  v_.resize(R * s.kv_dim());
  att_.resize(R * s.q_dim());
  gate_.resize(R * s.ffn_dim);
  up_.resize(R * s.ffn_dim);

  row_seq_.resize(R);
  row_end_.resize(R);
  capture_at_.assign(R, -1);
  dropped_.assign(R, 0);
  block_indptr_.assign(1, 0);
  block_ids_.clear();
  int32_t n_capture = 0;
  any_influence_ = false;
  for (size_t q = 0; q < step.seqs.size(); ++q) {
    const StepSeq& sq = step.seqs[q];
    for (int32_t r = sq.row_begin; r < sq.row_end; ++r) row_seq_[r] = static_cast<int32_t>(q);
    block_ids_.insert(block_ids_.end(), sq.blocks.begin(), sq.blocks.end());
    block_indptr_.push_back(static_cast<int32_t>(block_ids_.size()));
  }
  any_mask_ = false;
  for (int64_t r = 0; r < R; ++r) {
    const TokenRow& row = step.rows[r];
    row_end_[r] = row.layer_end == kAllLayers ? s.n_layers : row.layer_end;
    if (row.capture_layer >= 0) capture_at_[r] = n_capture++;
    any_influence_ |= row.influence;
    any_mask_ |= row.write_mask >= 0;
  }
  any_lr_ = false;
  lr_indptr_.assign(1, 0);
  lr_ids_.clear();
  for (const StepSeqLr& sl : step.seq_lr) {
    if (sl.adapter >= 0) {
      any_lr_ = true;
      lr_ids_.insert(lr_ids_.end(), sl.blocks.begin(), sl.blocks.end());
    }
    lr_indptr_.push_back(static_cast<int32_t>(lr_ids_.size()));
  }
  out->influence.assign(any_influence_ ? step.seqs.size() : 0, {});
  out->captures.resize(int64_t{n_capture} * s.d_model);
  active_.clear();
}

// Every layer over the rows active in it, with the captures each row asks for.
void Runner::run_layers(const Step& step, StepOutput* out) {
  const ModelSpec& s = model_->spec;
  const int64_t R = static_cast<int64_t>(step.rows.size());
  auto capture = [&](int l, bool leaving) {
    for (size_t i = 0; i < active_.size(); ++i) {
      const int32_t r = active_[i];
      if (step.rows[r].capture_layer == l && (!leaving || row_end_[r] == l)) {
        std::memcpy(&out->captures[int64_t{capture_at_[r]} * s.d_model], &x_[i * s.d_model],
                    sizeof(float) * s.d_model);
      }
    }
  };
  for (int l = 0; l < s.n_layers; ++l) {
    want_.clear();
    for (int64_t r = 0; r < R; ++r) {
      const TokenRow& row = step.rows[r];
      if (row.layer_begin <= l && l < row_end_[r] && !dropped_[r]) want_.push_back(static_cast<int32_t>(r));
    }
    // A row that stops at l with its capture there leaves with the hidden
    // state entering l: taken before the rows are compacted without it.
    capture(l, true);
    if (want_ != active_) set_active(step, want_);
    if (active_.empty()) continue;
    capture(l, false);
    // K/V entries computed at l: a row a hook drops at l still wrote them.
    for (size_t q = 0; q < step.seqs.size(); ++q) out->seq_row_layers[q] += row_indptr_[q + 1] - row_indptr_[q];
    out->row_layers += static_cast<int64_t>(active_.size());
    layer_forward(step, l, out);
  }
}

// Final norm and output projection, only for rows that want logits (all of
// them active at the last layer: validate() and run_hooks() see to it).
void Runner::output_logits(const Step& step, StepOutput* out) {
  const ModelSpec& s = model_->spec;
  const int32_t n_out = step.n_logit_rows();
  int64_t j = 0;
  for (size_t i = 0; i < active_.size(); ++i) {
    if (!step.rows[active_[i]].logits) continue;
    if (j != static_cast<int64_t>(i)) std::memcpy(&x_[j * s.d_model], &x_[i * s.d_model], sizeof(float) * s.d_model);
    ++j;
  }
  out->logits.resize(int64_t{n_out} * s.n_vocab);
  if (n_out == 0) return;
  backend_->rms_norm(x_.data(), model_->w.output_norm.f32(), h_.data(), n_out, s.d_model, s.norm_eps);
  linear(h_.data(), model_->output_weight(), out->logits.data(), n_out, s.d_model, s.n_vocab);
  if (const float c = s.final_logit_softcap; c > 0) {
    for (float& z : out->logits) z = c * std::tanh(z / c);
  }
}

void Runner::project_kv(int layer, const int64_t* wslots) {
  const ModelSpec& s = model_->spec;
  const LayerWeights& w = model_->w.layers[layer];
  backend_i& be = *backend_;
  const int64_t d = s.d_model, kvd = s.kv_dim();
  const int64_t n = static_cast<int64_t>(kv_rows_.size());
  const bool all = n == static_cast<int64_t>(active_.size());
  kv_slots_.resize(n);
  kv_pos_.resize(n);
  for (int64_t j = 0; j < n; ++j) {
    kv_slots_[j] = wslots[kv_rows_[j]];
    kv_pos_[j] = row_pos_[kv_rows_[j]];
  }
  if (n == 0) return;
  // The rows' normed inputs, gathered when some rows are left out: kernels
  // keep one reduction order per row whatever the row count, so a row's K/V
  // is bitwise the same either way.
  const float* hk = h_.data();
  if (!all) {
    hk_.resize(n * d);
    for (int64_t j = 0; j < n; ++j) std::memcpy(&hk_[j * d], &h_[kv_rows_[j] * d], sizeof(float) * d);
    hk = hk_.data();
  }
  linear_pair(hk, n, d, w.wk, k_.data(), kvd, w.wv, v_.data(), kvd);
  // LoRA on k and v for the adapters' rows among them, in gathered indexes.
  kv_pos_of_.assign(active_.size(), -1);
  for (int64_t j = 0; j < n; ++j) kv_pos_of_[kv_rows_[j]] = static_cast<int32_t>(j);
  for (const AdapterGroup& g : groups_) {
    for (const LoraTarget t : {LoraTarget::kK, LoraTarget::kV}) {
      const std::vector<int32_t>& rows = t == LoraTarget::kK ? g.kv_rows : g.v_rows;
      if (rows.empty()) continue;
      const LoraMatrix& m = g.adapter->layers[layer].at(t);
      if (m.empty()) continue;
      lora_rows_.clear();
      for (int32_t c : rows) {
        if (kv_pos_of_[c] >= 0) lora_rows_.push_back(kv_pos_of_[c]);
      }
      if (lora_rows_.empty()) continue;
      be.lora(hk, d, LoraView{m.a.data(), m.b.data(), m.rank, m.scale}, lora_rows_.data(),
              static_cast<int64_t>(lora_rows_.size()), t == LoraTarget::kK ? k_.data() : v_.data(), kvd);
    }
  }
  if (!w.bk.empty()) {
    for (int64_t j = 0; j < n; ++j) {
      be.add(w.bk.f32(), &k_[j * kvd], kvd);
      be.add(w.bv.f32(), &v_[j * kvd], kvd);
    }
  }
  if (!w.k_norm.empty()) be.rms_norm(k_.data(), w.k_norm.f32(), k_.data(), n * s.n_kv_heads, s.head_dim, s.norm_eps);
  be.rope(k_.data(), kv_pos_.data(), n, s.n_kv_heads, s.head_dim, rope_for(layer));
}

const int64_t* Runner::write_slots(const Step& step, int layer) {
  if (!any_mask_) return slots_.data();
  masked_slots_.resize(active_.size());
  for (size_t i = 0; i < active_.size(); ++i) {
    const int32_t m = step.rows[active_[i]].write_mask;
    masked_slots_[i] = m >= 0 && !step.write_masks[m][layer] ? -1 : slots_[i];
  }
  return masked_slots_.data();
}

void Runner::layer_forward(const Step& step, int layer, StepOutput* out) {
  const ModelSpec& s = model_->spec;
  const LayerWeights& w = model_->w.layers[layer];
  backend_i& be = *backend_;
  const int64_t qd = s.q_dim();
  int64_t R = static_cast<int64_t>(active_.size());

  // Attention block: x += Wo · attn(rope(Wq h), rope(Wk h), Wv h), h = norm(x).
  // Each adapter's LoRA delta goes onto the Linear's output before anything
  // else (PEFT: the bias belongs to the base Linear, and x·W^T + b + delta is
  // the merged x·(W + scale·B·A)^T + b), so before q/k norm and RoPE.
  be.rms_norm(x_.data(), w.attn_norm.f32(), h_.data(), R, s.d_model, s.norm_eps);
  linear(h_.data(), w.wq, q_.data(), R, s.d_model, qd);
  apply_lora(layer, LoraTarget::kQ, h_.data(), s.d_model, q_.data(), qd);
  if (!w.bq.empty()) {
    for (int64_t r = 0; r < R; ++r) be.add(w.bq.f32(), &q_[r * qd], qd);
  }
  if (!w.q_norm.empty()) {  // qwen3, gemma3: RMSNorm over each head before RoPE
    be.rms_norm(q_.data(), w.q_norm.f32(), q_.data(), R * s.n_heads, s.head_dim, s.norm_eps);
  }
  be.rope(q_.data(), row_pos_.data(), R, s.n_heads, s.head_dim, rope_for(layer));
  bool hooked = false;
  for (const LayerHook& h : step.hooks) hooked |= h.layer == layer;
  KvLayerView kv = kv_->layer_view(layer);
  if (any_lr_) write_lr(layer);  // before any row leaves: a dropped row's LR stays written, as its K/V
  const int64_t* wslots = write_slots(step, layer);
  // K/V projections only for the rows that write K/V here: a row that keeps
  // the cached entry (LRAgent's LR prefill, DroidSpeak outside its critical
  // layers, an ICaRus decoder row) never reads its own. A hook sees every
  // row's fresh K/V, so a hooked layer computes them all.
  kv_rows_.clear();
  for (int64_t i = 0; i < R; ++i) {
    if (hooked || wslots[i] >= 0) kv_rows_.push_back(static_cast<int32_t>(i));
  }
  project_kv(layer, wslots);
  if (hooked) {
    run_hooks(step, layer);  // writes K/V, then may drop rows
    R = static_cast<int64_t>(active_.size());
    if (R == 0) return;
  } else if (!kv_rows_.empty()) {
    be.kv_write(kv, k_.data(), v_.data(), kv_slots_.data(), static_cast<int64_t>(kv_rows_.size()));
  }
  if (any_influence_) plan_influence(step);
  if (any_lr_) plan_lr(step, layer);
  plan_.window = s.layer_window(layer);
  be.attention(plan_, q_.data(), s.n_heads, kv, s.attn_scale, att_.data());
  plan_.lr = nullptr;
  if (any_influence_) collect_influence(step, out);
  residual_out(layer, w.wo, w.post_attn_norm, LoraTarget::kO, att_.data(), qd, R);

  // Feed-forward block: x += W_down · (act(W_gate h) * W_up h), h = norm(x),
  // act silu (SwiGLU) or tanh GELU (GeGLU).
  be.rms_norm(x_.data(), w.ffn_norm.f32(), h_.data(), R, s.d_model, s.norm_eps);
  linear_pair(h_.data(), R, s.d_model, w.w_gate, gate_.data(), s.ffn_dim, w.w_up, up_.data(), s.ffn_dim);
  apply_lora(layer, LoraTarget::kGate, h_.data(), s.d_model, gate_.data(), s.ffn_dim);
  apply_lora(layer, LoraTarget::kUp, h_.data(), s.d_model, up_.data(), s.ffn_dim);
  if (s.arch.ffn_act == FfnAct::kGeluTanh) {
    be.geglu(gate_.data(), up_.data(), gate_.data(), R * s.ffn_dim);
  } else {
    be.swiglu(gate_.data(), up_.data(), gate_.data(), R * s.ffn_dim);
  }
  residual_out(layer, w.w_down, w.post_ffn_norm, LoraTarget::kDown, gate_.data(), s.ffn_dim, R);
}

void Runner::residual_out(int layer, const DenseTensor& w, const DenseTensor& post_norm, LoraTarget t,
                          const float* in, int64_t k, int64_t R) {
  const int64_t d = model_->spec.d_model;
  if (post_norm.empty()) {
    // The product accumulates into the residual stream, and so does its LoRA delta.
    linear(in, w, x_.data(), R, k, d, /*accumulate=*/true);
    apply_lora(layer, t, in, k, x_.data(), d);
    return;
  }
  // Gemma: x += norm(W in + delta), the norm over the whole projection (LoRA
  // included: PEFT adds it to the Linear's output). h_ is free by now.
  linear(in, w, h_.data(), R, k, d);
  apply_lora(layer, t, in, k, h_.data(), d);
  backend_->rms_norm(h_.data(), post_norm.f32(), h_.data(), R, d, model_->spec.norm_eps);
  backend_->add(h_.data(), x_.data(), R * d);
}

}  // namespace agentkv
