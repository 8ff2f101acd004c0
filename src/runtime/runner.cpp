#include "runtime/runner.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

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
  // not depend on it); the f32 copy exists only for types the backend cannot
  // read packed (model_load's packed_only).
  if (!w.packed.empty() && backend_->supports_quant(w.packed_type)) {
    QuantMatrix q{w.packed_type, w.packed.data(), w.packed_row_bytes, n, k};
    backend_->matmul_quant(x, q, y, R, accumulate);
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
    backend_->matmul_quant_pair(x, QuantMatrix{wa.packed_type, wa.packed.data(), wa.packed_row_bytes, na, k}, ya,
                                QuantMatrix{wb.packed_type, wb.packed.data(), wb.packed_row_bytes, nb, k}, yb, R);
    return;
  }
  linear(x, wa, ya, R, k, na);
  linear(x, wb, yb, R, k, nb);
}

void Runner::embed(int32_t token, float* dst) const {
  // A packed-only table decodes the row to exactly what an f32 copy holds.
  if (!model_->w.tok_embd.row_f32(token, dst))
    std::fill(dst, dst + model_->spec.d_model, std::numeric_limits<float>::quiet_NaN());
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
    const int32_t end = row.layer_end == kAllLayers ? s.n_layers : row.layer_end;
    if (row.layer_begin < 0 || row.layer_begin >= s.n_layers || end <= row.layer_begin || end > s.n_layers) {
      return make_error(ErrorCode::kInternal, "row layers [", row.layer_begin, ", ", row.layer_end,
                        ") are not a non-empty range of the model's ", s.n_layers);
    }
    if (row.logits && end != s.n_layers) return make_error(ErrorCode::kInternal, "a row with logits must reach the last layer");
    const int64_t n_hidden = static_cast<int64_t>(step.hidden_in.size()) / s.d_model;
    if (row.layer_begin > 0 ? (row.hidden_in < 0 || row.hidden_in >= n_hidden) : row.hidden_in != -1) {
      return make_error(ErrorCode::kInternal, "a row starting at layer ", row.layer_begin,
                        row.layer_begin > 0 ? " needs an injected hidden state" : " takes no injected hidden state");
    }
    if (row.capture_layer != -1 &&
        (row.capture_layer < row.layer_begin || row.capture_layer > end || row.capture_layer >= s.n_layers)) {
      return make_error(ErrorCode::kInternal, "capture layer ", row.capture_layer,
                        " outside the row's layers and the one it stops at");
    }
    if (row.write_mask < -1 || row.write_mask >= static_cast<int64_t>(step.write_masks.size())) {
      return make_error(ErrorCode::kInternal, "row write mask ", row.write_mask, " outside the step's masks");
    }
  }
  for (const std::vector<uint8_t>& m : step.write_masks) {
    if (static_cast<int64_t>(m.size()) != s.n_layers) return make_error(ErrorCode::kInternal, "a write mask must cover every layer");
  }
  AKV_RETURN_IF_ERROR(validate_lr(step));
  if (step.hidden_in.size() % s.d_model != 0) return make_error(ErrorCode::kInternal, "hidden_in is not whole rows");
  for (const LayerHook& h : step.hooks) {
    if (h.seq < 0 || h.seq >= static_cast<int64_t>(step.seqs.size()) || h.layer < 0 || h.layer >= s.n_layers || !h.fn) {
      return make_error(ErrorCode::kInternal, "hook at sequence ", h.seq, " layer ", h.layer, " is malformed");
    }
    const StepSeq& q = step.seqs[h.seq];
    for (int32_t r : h.colsum_rows) {
      if (r < q.row_begin || r >= q.row_end) return make_error(ErrorCode::kInternal, "colsum row outside the hook's sequence");
    }
    if (!std::is_sorted(h.colsum_rows.begin(), h.colsum_rows.end())) {
      return make_error(ErrorCode::kInternal, "colsum rows must be ascending");
    }
  }
  const int64_t n_slots = kv_->n_blocks() * g.block_size;
  for (const KvCopy& c : step.copies) {
    if (c.src_slot < 0 || c.src_slot >= n_slots || c.dst_slot < 0 || c.dst_slot >= n_slots || c.src_slot == c.dst_slot) {
      return make_error(ErrorCode::kInternal, "KV copy slots ", c.src_slot, " -> ", c.dst_slot, " out of range");
    }
  }
  return Status::ok();
}

Status Runner::validate_lr(const Step& step) const {
  const int32_t bs = kv_->geometry().block_size;
  if (!step.seq_lr.empty() && step.seq_lr.size() != step.seqs.size()) {
    return make_error(ErrorCode::kInternal, "seq_lr must be empty or one per sequence");
  }
  for (size_t qi = 0; qi < step.seqs.size(); ++qi) {
    const StepSeq& q = step.seqs[qi];
    static const StepSeqLr kNone;
    const StepSeqLr& ql = step.seq_lr.empty() ? kNone : step.seq_lr[qi];
    if (ql.adapter == -1) {
      for (int32_t r = q.row_begin; r < q.row_end; ++r) {
        if (step.rows[r].lr_slot != -1) return make_error(ErrorCode::kInternal, "an LR slot outside an LR sequence");
      }
      continue;
    }
    if (lr_ == nullptr) return make_error(ErrorCode::kInvalidArgument, "the step reads an LR cache the runner has none of");
    if (ql.adapter < 0 || ql.adapter >= static_cast<int64_t>(step.adapters.size())) {
      return make_error(ErrorCode::kInternal, "LR adapter index ", ql.adapter, " outside the step's adapters");
    }
    const Adapter& a = *step.adapters[ql.adapter];
    for (const LoraLayer& l : a.layers) {
      if (l.at(LoraTarget::kV).rank > lr_->geometry().width) {
        return make_error(ErrorCode::kInvalidArgument, "adapter '", a.name, "' has v_proj rank ", l.at(LoraTarget::kV).rank,
                          ", above the LR cache's ", lr_->geometry().width);
      }
    }
    for (int32_t b : ql.blocks) {
      if (b < 0 || b >= lr_->n_blocks()) return make_error(ErrorCode::kInternal, "LR block id ", b, " out of range");
    }
    for (int32_t r = q.row_begin; r < q.row_end; ++r) {
      const TokenRow& row = step.rows[r];
      // Attention of a row at p reads V_lr of keys 0..p: the LR table must reach it.
      if (row.pos / bs >= static_cast<int64_t>(ql.blocks.size())) {
        return make_error(ErrorCode::kInternal, "row position ", row.pos, " beyond its LR block table");
      }
      if (row.lr_slot == -1) continue;
      const int64_t want = int64_t{ql.blocks[row.pos / bs]} * bs + row.pos % bs;
      if (row.lr_slot != want || row.adapter != ql.adapter) {
        return make_error(ErrorCode::kInternal, "row LR slot does not match its LR block table or adapter");
      }
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
    groups_[i].v_rows.clear();
    groups_[i].lr_rows.clear();
  }
  for (size_t i = 0; i < active_.size(); ++i) {
    const TokenRow& row = step.rows[active_[i]];
    if (row.adapter < 0) continue;
    AdapterGroup& g = groups_[row.adapter];
    const int32_t ci = static_cast<int32_t>(i);
    g.rows.push_back(ci);
    const bool lr_seq = !step.seq_lr.empty() && step.seq_lr[row_seq_[active_[i]]].adapter >= 0;
    if (row.slot >= 0) g.kv_rows.push_back(ci);
    if (row.slot >= 0 && !lr_seq) g.v_rows.push_back(ci);
    if (row.lr_slot >= 0) g.lr_rows.push_back(ci);
  }
}

void Runner::apply_lora(int layer, LoraTarget t, const float* x, int64_t k, float* y, int64_t n) {
  for (const AdapterGroup& g : groups_) {
    const std::vector<int32_t>& rows = t == LoraTarget::kK ? g.kv_rows : t == LoraTarget::kV ? g.v_rows : g.rows;
    if (rows.empty()) continue;
    const LoraMatrix& m = g.adapter->layers[layer].at(t);
    if (m.empty()) continue;
    backend_->lora(x, k, LoraView{m.a.data(), m.b.data(), m.rank, m.scale}, rows.data(),
                   static_cast<int64_t>(rows.size()), y, n);
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
  const ModelSpec& s = model_->spec;
  const int64_t R = static_cast<int64_t>(step.rows.size());
  out->row_layers = 0;
  out->seq_row_layers.assign(step.seqs.size(), 0);
  out->captures.clear();
  if (!step.copies.empty()) {
    // Segments found elsewhere in the cache join first, in every layer.
    const int64_t n = static_cast<int64_t>(step.copies.size());
    copy_src_.resize(n);
    copy_dst_.resize(n);
    copy_delta_.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      copy_src_[i] = step.copies[i].src_slot;
      copy_dst_[i] = step.copies[i].dst_slot;
      copy_delta_[i] = step.copies[i].delta;
    }
    for (int l = 0; l < s.n_layers; ++l) {
      backend_->kv_copy_rotate(kv_->layer_view(l), copy_src_.data(), copy_dst_.data(), copy_delta_.data(), n, rope_);
    }
  }
  if (R == 0) {
    out->logits.clear();
    return Status::ok();
  }

  // The residual stream needs room for every row (x_, xn_); the other
  // scratch holds the active rows, at most R.
  for (AlignedVector<float>* b : {&x_, &xn_, &h_}) b->resize(R * s.d_model);
  q_.resize(R * s.q_dim());
  k_.resize(R * s.kv_dim());
  v_.resize(R * s.kv_dim());
  att_.resize(R * s.q_dim());
  gate_.resize(R * s.ffn_dim);
  up_.resize(R * s.ffn_dim);

  // Per-row facts, and the block tables in CSR form, once per step
  // (FlashInfer's plan/run split): every layer reuses them.
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
  // LR block tables in CSR form, once per step, as the K/V's.
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

  for (int l = 0; l < s.n_layers; ++l) {
    want_.clear();
    for (int64_t r = 0; r < R; ++r) {
      const TokenRow& row = step.rows[r];
      if (row.layer_begin <= l && l < row_end_[r] && !dropped_[r]) want_.push_back(static_cast<int32_t>(r));
    }
    // A row that stops at l with its capture there leaves with the hidden
    // state entering l: taken before the rows are compacted without it.
    for (size_t i = 0; i < active_.size(); ++i) {
      const int32_t r = active_[i];
      if (step.rows[r].capture_layer == l && row_end_[r] == l) {
        std::memcpy(&out->captures[int64_t{capture_at_[r]} * s.d_model], &x_[i * s.d_model], sizeof(float) * s.d_model);
      }
    }
    if (want_ != active_) set_active(step, want_);
    if (active_.empty()) continue;
    for (size_t i = 0; i < active_.size(); ++i) {
      const int32_t r = active_[i];
      if (step.rows[r].capture_layer == l) {
        std::memcpy(&out->captures[int64_t{capture_at_[r]} * s.d_model], &x_[i * s.d_model], sizeof(float) * s.d_model);
      }
    }
    // K/V entries computed at l: a row a hook drops at l still wrote them.
    for (size_t q = 0; q < step.seqs.size(); ++q) out->seq_row_layers[q] += row_indptr_[q + 1] - row_indptr_[q];
    out->row_layers += static_cast<int64_t>(active_.size());
    layer_forward(step, l, out);
  }

  // Final norm and output projection, only for rows that want logits (all
  // of them active at the last layer: validate() and run_hooks() see to it).
  const int32_t n_out = step.n_logit_rows();
  int64_t j = 0;
  for (size_t i = 0; i < active_.size(); ++i) {
    if (!step.rows[active_[i]].logits) continue;
    if (j != static_cast<int64_t>(i)) std::memcpy(&x_[j * s.d_model], &x_[i * s.d_model], sizeof(float) * s.d_model);
    ++j;
  }
  out->logits.resize(int64_t{n_out} * s.n_vocab);
  if (n_out == 0) return Status::ok();
  backend_->rms_norm(x_.data(), model_->w.output_norm.f32(), h_.data(), n_out, s.d_model, s.norm_eps);
  linear(h_.data(), model_->output_weight(), out->logits.data(), n_out, s.d_model, s.n_vocab);
  return Status::ok();
}

void Runner::run_hooks(const Step& step, int layer) {
  const ModelSpec& s = model_->spec;
  const KvGeometry& g = kv_->geometry();
  const int64_t qd = s.q_dim(), kvd = s.kv_dim();
  // Cached K/V the hooked rows are about to overwrite, gathered before the
  // write: [hook rows in hook order][kv_dim].
  struct Pending {
    const LayerHook* hook;
    int32_t c_begin, c_end;  // compact rows of the hook's sequence
    int64_t gathered;        // offset into hook_k_/hook_v_ in rows
  };
  std::vector<Pending> pend;
  int64_t n_gather = 0;
  for (const LayerHook& h : step.hooks) {
    if (h.layer != layer) continue;
    const int32_t cb = row_indptr_[h.seq], ce = row_indptr_[h.seq + 1];
    if (cb == ce) continue;
    pend.push_back({&h, cb, ce, n_gather});
    n_gather += ce - cb;
  }
  hook_k_.resize(n_gather * kvd);
  hook_v_.resize(n_gather * kvd);
  for (const Pending& p : pend) {
    const std::vector<int32_t>& blocks = step.seqs[p.hook->seq].blocks;
    for (int32_t i = p.c_begin; i < p.c_end; ++i) {
      const int32_t pos = row_pos_[i];
      const int32_t b = blocks[pos / g.block_size], off = pos % g.block_size;
      const int64_t at = (p.gathered + i - p.c_begin) * kvd;
      kv_->read_k(layer, b, off, &hook_k_[at]);
      kv_->read_v(layer, b, off, &hook_v_[at]);
    }
  }
  KvLayerView kv = kv_->layer_view(layer);
  backend_->kv_write(kv, k_.data(), v_.data(), write_slots(step, layer), static_cast<int64_t>(active_.size()));

  bool any_dropped = false;
  for (const Pending& p : pend) {
    const LayerHook& h = *p.hook;
    const int32_t n = p.c_end - p.c_begin;
    HookView view;
    view.layer = layer;
    view.rows = std::span<const int32_t>(active_.data() + p.c_begin, n);
    view.q = &q_[p.c_begin * qd];
    view.k = &k_[p.c_begin * kvd];
    view.v = &v_[p.c_begin * kvd];
    view.cached_k = &hook_k_[p.gathered * kvd];
    view.cached_v = &hook_v_[p.gathered * kvd];
    view.q_dim = qd;
    view.kv_dim = kvd;
    if (!h.colsum_rows.empty()) {
      const int64_t nq = static_cast<int64_t>(h.colsum_rows.size());
      hook_q_.resize(nq * qd);
      hook_pos_.resize(nq);
      int32_t n_keys = 0;
      int64_t qi = 0;
      for (int32_t r : h.colsum_rows) {
        // validate() checked that r belongs to the hook's sequence; skip rows
        // not active at this layer.
        auto it = std::lower_bound(view.rows.begin(), view.rows.end(), r);
        if (it == view.rows.end() || *it != r) continue;
        const int64_t ci = p.c_begin + (it - view.rows.begin());
        std::memcpy(&hook_q_[qi * qd], &q_[ci * qd], sizeof(float) * qd);
        hook_pos_[qi] = row_pos_[ci];
        n_keys = std::max(n_keys, row_pos_[ci] + 1);
        ++qi;
      }
      colsum_.assign(n_keys, 0.0f);
      const std::vector<int32_t>& blocks = step.seqs[h.seq].blocks;
      if (qi > 0) {
        backend_->attention_colsum(hook_q_.data(), hook_pos_.data(), qi, s.n_heads, blocks.data(),
                                   static_cast<int32_t>(blocks.size()), n_keys, kv,
                                   1.0f / std::sqrt(static_cast<float>(s.head_dim)), colsum_.data());
      }
      view.colsum = colsum_;
    }
    keep_.assign(n, 1);
    h.fn(view, keep_);
    for (int32_t i = 0; i < n; ++i) {
      const int32_t r = view.rows[i];
      if (keep_[i] || step.rows[r].logits) continue;  // rows with logits always stay
      dropped_[r] = 1;
      any_dropped = true;
    }
  }
  if (!any_dropped) return;
  // Compact the rows that stay: their residual and queries; K/V are written.
  size_t j = 0;
  for (size_t i = 0; i < active_.size(); ++i) {
    if (dropped_[active_[i]]) continue;
    if (j != i) {
      std::memcpy(&x_[j * s.d_model], &x_[i * s.d_model], sizeof(float) * s.d_model);
      std::memcpy(&q_[j * qd], &q_[i * qd], sizeof(float) * qd);
      active_[j] = active_[i];
    }
    ++j;
  }
  active_.resize(j);
  rebuild_plan(step);
}

void Runner::plan_influence(const Step& step) {
  influence_slot_.assign(active_.size(), -1);
  int32_t n = 0, stride = 0;
  for (size_t i = 0; i < active_.size(); ++i) {
    if (!step.rows[active_[i]].influence) continue;
    influence_slot_[i] = n++;
    stride = std::max(stride, row_pos_[i] + 1);
  }
  plan_.colsum_slot = n > 0 ? influence_slot_.data() : nullptr;
  plan_.colsum_stride = stride;
  influence_buf_.assign(static_cast<size_t>(n) * kv_->geometry().kv_heads * stride, 0.0f);
  plan_.colsum = influence_buf_.data();
}

void Runner::collect_influence(const Step& step, StepOutput* out) {
  if (plan_.colsum_slot == nullptr) return;
  const int32_t bs = kv_->geometry().block_size, kvh = kv_->geometry().kv_heads;
  for (size_t i = 0; i < active_.size(); ++i) {
    const int32_t slot = influence_slot_[i];
    if (slot < 0) continue;
    const int32_t q = row_seq_[active_[i]];
    std::vector<float>& acc = out->influence[q];
    if (acc.empty()) acc.assign(step.seqs[q].blocks.size() * static_cast<size_t>(bs), 0.0f);
    for (int32_t h = 0; h < kvh; ++h) {
      const float* line = &influence_buf_[(static_cast<size_t>(slot) * kvh + h) * plan_.colsum_stride];
      for (int32_t j = 0; j <= row_pos_[i]; ++j) acc[j] += line[j];
    }
  }
  plan_.colsum_slot = nullptr;
  plan_.colsum = nullptr;
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
  be.rope(k_.data(), kv_pos_.data(), n, s.n_kv_heads, s.head_dim, rope_);
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

void Runner::write_lr(int layer) {
  const int64_t d = model_->spec.d_model;
  for (const AdapterGroup& g : groups_) {
    if (g.lr_rows.empty()) continue;
    const LoraMatrix& m = g.adapter->layers[layer].at(LoraTarget::kV);
    const int64_t n = static_cast<int64_t>(g.lr_rows.size());
    const int32_t w = lr_->geometry().width;
    lr_t_.resize(n * std::max(m.rank, 1));
    if (m.rank > 0) backend_->lora_down(h_.data(), d, m.a.data(), m.rank, g.lr_rows.data(), n, lr_t_.data());
    lr_row_.assign(w, 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      if (m.rank > 0) std::copy_n(&lr_t_[i * m.rank], m.rank, lr_row_.begin());
      lr_->write_row(layer, slots_lr_[g.lr_rows[i]], lr_row_.data());
    }
  }
}

void Runner::plan_lr(const Step& step, int layer) {
  const size_t n = step.seqs.size();
  lr_b_.assign(n, nullptr);
  lr_rank_.assign(n, 0);
  lr_scale_.assign(n, 0.0f);
  for (size_t q = 0; q < n; ++q) {
    const int32_t ai = step.seq_lr[q].adapter;
    if (ai < 0) continue;
    const LoraMatrix& m = step.adapters[ai]->layers[layer].at(LoraTarget::kV);
    if (m.empty()) continue;  // no v_proj LoRA at this layer: V is the base's
    lr_b_[q] = m.b.data();
    lr_rank_[q] = m.rank;
    lr_scale_[q] = m.scale;
  }
  lr_plan_.lr = lr_->layer_base(layer);
  lr_plan_.dtype = lr_->geometry().dtype;
  lr_plan_.block_stride = lr_->block_stride();
  lr_plan_.width = lr_->geometry().width;
  lr_plan_.block_indptr = lr_indptr_.data();
  lr_plan_.block_ids = lr_ids_.data();
  lr_plan_.b = lr_b_.data();
  lr_plan_.rank = lr_rank_.data();
  lr_plan_.scale = lr_scale_.data();
  lr_plan_.path = flash_lora_ ? LrAttention::Path::kAuto : LrAttention::Path::kExpand;
  plan_.lr = &lr_plan_;
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
  if (!w.q_norm.empty()) {  // qwen3: RMSNorm over each head before RoPE
    be.rms_norm(q_.data(), w.q_norm.f32(), q_.data(), R * s.n_heads, s.head_dim, s.norm_eps);
  }
  be.rope(q_.data(), row_pos_.data(), R, s.n_heads, s.head_dim, rope_);
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
  be.attention(plan_, q_.data(), s.n_heads, kv, 1.0f / std::sqrt(static_cast<float>(s.head_dim)), att_.data());
  plan_.lr = nullptr;
  if (any_influence_) collect_influence(step, out);
  // Wo accumulates into the residual stream, and so does its LoRA delta.
  linear(att_.data(), w.wo, x_.data(), R, qd, s.d_model, /*accumulate=*/true);
  apply_lora(layer, LoraTarget::kO, att_.data(), qd, x_.data(), s.d_model);

  // Feed-forward block: x += W_down · (silu(W_gate h) * W_up h), h = norm(x).
  be.rms_norm(x_.data(), w.ffn_norm.f32(), h_.data(), R, s.d_model, s.norm_eps);
  linear_pair(h_.data(), R, s.d_model, w.w_gate, gate_.data(), s.ffn_dim, w.w_up, up_.data(), s.ffn_dim);
  apply_lora(layer, LoraTarget::kGate, h_.data(), s.d_model, gate_.data(), s.ffn_dim);
  apply_lora(layer, LoraTarget::kUp, h_.data(), s.d_model, up_.data(), s.ffn_dim);
  be.swiglu(gate_.data(), up_.data(), gate_.data(), R * s.ffn_dim);
  linear(gate_.data(), w.w_down, x_.data(), R, s.ffn_dim, s.d_model, /*accumulate=*/true);
  apply_lora(layer, LoraTarget::kDown, gate_.data(), s.ffn_dim, x_.data(), s.d_model);
}

}  // namespace agentkv
