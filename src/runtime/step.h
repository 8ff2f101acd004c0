// A Step is the unit the runner executes: the token rows of a whole batch of
// sequences (docs/design.md §2). Dense prefill, prefix hits, decode, sparse
// recomputation and ICaRus paired decode are just different row sets: a row
// is active in a range of layers, may join above layer 0 with an injected
// hidden state, and writes its K/V or keeps the cached entry. Hooks let a
// sequence's planner choose, inside the forward pass, which rows stay active.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace agentkv {

struct Adapter;  // adapter/adapter.h

inline constexpr int32_t kAllLayers = -1;  // TokenRow::layer_end: up to the last layer

// The KV slot of position `pos` of a sequence whose blocks are `blocks`.
inline int64_t kv_slot(const std::vector<int32_t>& blocks, int32_t pos, int32_t block_size) {
  return int64_t{blocks[pos / block_size]} * block_size + pos % block_size;
}

struct TokenRow {
  int32_t token = 0;   // input token id
  int32_t pos = 0;     // position in its sequence
  // KV slot its K/V is written to: block_id * block_size + offset of `pos` in
  // its sequence's block table. Negative: the row writes no K/V and only reads
  // the cache. That is the ICaRus decoder row (ICaRus App. B, Alg. 3): the K/V
  // at its position is the base model's, written by the paired encoder row of
  // the same Step (the same token and position, adapter -1) or by an earlier Step.
  int64_t slot = 0;
  bool logits = false; // compute logits for this row (it must reach the last layer)
  int32_t adapter = -1; // index into Step::adapters; -1: the base weights
  // Layers the row is active in: [layer_begin, layer_end). In the others the
  // cached K/V at its position stays as it is. A row that starts above layer
  // 0 brings its hidden state entering layer_begin from Step::hidden_in.
  int32_t layer_begin = 0;
  int32_t layer_end = kAllLayers;
  int32_t hidden_in = -1;      // row of Step::hidden_in (layer_begin > 0 only)
  // Capture: the hidden state entering this layer (in [layer_begin,
  // layer_end], below the layer count; at layer_end, the state the row
  // stops with) is written to the runner's capture output; -1: none.
  int32_t capture_layer = -1;
  // Capture: the attention mass this row's query gives each key position of
  // its sequence, summed over the layers it is active in and all query
  // heads, into StepOutput::influence (RelayCaching's influence score).
  bool influence = false;
  // The layers, among its active ones, where the row writes its K/V (slot >=
  // 0): -1 every one; else Step::write_masks[write_mask][layer] != 0 only.
  // DroidSpeak recomputes K/V in its critical layers and keeps the cached
  // entries in the others, while the row runs through all of them.
  int32_t write_mask = -1;
  // LRAgent: the LR cache slot (LR block * block_size + offset) where the row
  // writes X·A^T of its adapter's v_proj at every active layer; -1: none.
  // Only in a sequence with an LR adapter (Step::seq_lr), with that adapter.
  int64_t lr_slot = -1;
};

struct StepSeq {
  int32_t row_begin = 0;       // rows [row_begin, row_end) of Step::rows belong to this sequence
  int32_t row_end = 0;
  std::vector<int32_t> blocks; // block table: KV position j lives in blocks[j / block_size]
};

// LRAgent (docs/scheme_algorithms.md §1.2), per Step sequence: adapter >= 0 is an index
// into Step::adapters whose v_proj LoRA lives in the LR cache: the
// sequence's V is V_base + scale · V_lr · B (Flash-LoRA-Attention), its rows
// add no v_proj LoRA to the V they write, and V_lr of position j is in LR
// block blocks[j / block_size]. -1: none.
struct StepSeqLr {
  int32_t adapter = -1;
  std::vector<int32_t> blocks;
};

// What a hook sees at its layer, for the rows of its sequence active there,
// in row order. Q/K/V are fresh (after any bias, q/k norm and RoPE); the
// cached K/V are the entries at the rows' positions before this layer wrote
// them. Arrays are row-major: q [n, q_dim], k/v/cached_* [n, kv_dim].
struct HookView {
  int32_t layer = 0;
  std::span<const int32_t> rows;  // Step::rows indexes
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* cached_k = nullptr;
  const float* cached_v = nullptr;
  int64_t q_dim = 0;
  int64_t kv_dim = 0;
  // When the hook asked for it: attention mass each key position 0..n_keys-1
  // of the sequence receives from the hook's colsum_rows, summed over those
  // queries and all query heads, after this layer's K/V were written.
  std::span<const float> colsum;
};

// A hook at one layer of one sequence. It runs after the layer's Q/K/V are
// computed and written, before attention; it clears keep[i] for the rows
// (HookView::rows[i]) that leave: they skip this layer's attention and FFN
// and every later layer, their K/V at this layer stays the fresh one. Rows
// that want logits always stay.
struct LayerHook {
  int32_t seq = 0;    // index into Step::seqs
  int32_t layer = 0;
  std::vector<int32_t> colsum_rows;  // Step::rows indexes (active at `layer`) for HookView::colsum; empty: none
  std::function<void(const HookView& view, std::span<uint8_t> keep)> fn;
};

// A cached K/V entry copied to another slot before the step runs, in every
// layer: K rotated by `delta` positions (RoPE delta rotation), V as is. This
// is how a segment found elsewhere in the cache joins a sequence.
struct KvCopy {
  int64_t src_slot = 0;
  int64_t dst_slot = 0;
  int32_t delta = 0;
};

struct Step {
  std::vector<TokenRow> rows;
  std::vector<StepSeq> seqs;
  // The adapters the rows name (TokenRow::adapter), not owned: the caller
  // keeps them alive for the call. Each must fit the model (layer count,
  // module shapes); Runner::execute checks.
  std::vector<const Adapter*> adapters;
  std::vector<float> hidden_in;  // [n, d_model]: injected hidden states (TokenRow::hidden_in)
  std::vector<LayerHook> hooks;
  std::vector<KvCopy> copies;    // done first, before any row runs
  std::vector<std::vector<uint8_t>> write_masks;  // [mask][layer]: TokenRow::write_mask
  std::vector<StepSeqLr> seq_lr;  // empty, or one per StepSeq

  int32_t n_logit_rows() const {
    int32_t n = 0;
    for (const auto& r : rows) n += r.logits ? 1 : 0;
    return n;
  }
};

// What a Step produces besides the KV it writes.
struct StepOutput {
  std::vector<float> logits;    // [n_logit_rows, n_vocab], logits rows in row order
  std::vector<float> captures;  // [n_capture_rows, d_model], capturing rows in row order
  // Per Step sequence: [n_keys] attention mass each key position received
  // from its rows with TokenRow::influence (summed over them, their layers
  // and heads); n_keys is the sequence's block table span. Empty for a
  // sequence without such rows.
  std::vector<std::vector<float>> influence;
  // K/V entries computed (rows active at each layer, summed), for metrics:
  // in all and per Step sequence.
  int64_t row_layers = 0;
  std::vector<int64_t> seq_row_layers;
};

}  // namespace agentkv
