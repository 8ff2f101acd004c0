// A Step is the unit the runner executes: the token rows of a whole batch of
// sequences (DESIGN.md §2). Prefill, decode and prefix hits are just different
// row sets; rows carry their adapter, later schemes add layer ranges.
#pragma once

#include <cstdint>
#include <vector>

namespace agentkv {

struct Adapter;  // adapter/adapter.h

struct TokenRow {
  int32_t token = 0;   // input token id
  int32_t pos = 0;     // position in its sequence
  // KV slot its K/V is written to: block_id * block_size + offset of `pos` in
  // its sequence's block table. Negative: the row writes no K/V and only reads
  // the cache. That is the ICaRus decoder row (ICaRus App. B, Alg. 3): the K/V
  // at its position is the base model's, written by the paired encoder row of
  // the same Step (the same token and position, adapter -1) or by an earlier Step.
  int64_t slot = 0;
  bool logits = false; // compute logits for this row
  int32_t adapter = -1; // index into Step::adapters; -1: the base weights
};

struct StepSeq {
  int32_t row_begin = 0;       // rows [row_begin, row_end) of Step::rows belong to this sequence
  int32_t row_end = 0;
  std::vector<int32_t> blocks; // block table: KV position j lives in blocks[j / block_size]
};

struct Step {
  std::vector<TokenRow> rows;
  std::vector<StepSeq> seqs;
  // The adapters the rows name (TokenRow::adapter), not owned: the caller
  // keeps them alive for the call. Each must fit the model (layer count,
  // module shapes); Runner::execute checks.
  std::vector<const Adapter*> adapters;

  int32_t n_logit_rows() const {
    int32_t n = 0;
    for (const auto& r : rows) n += r.logits ? 1 : 0;
    return n;
  }
};

}  // namespace agentkv
