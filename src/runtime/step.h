// A Step is the unit the runner executes: the token rows of a whole batch of
// sequences (DESIGN.md §2). Prefill, decode and prefix hits are just different
// row sets; later schemes add per-row adapters and layer ranges.
#pragma once

#include <cstdint>
#include <vector>

namespace agentkv {

struct TokenRow {
  int32_t token = 0;   // input token id
  int32_t pos = 0;     // position in its sequence
  int64_t slot = 0;    // KV slot its K/V is written to: block_id * block_size + offset
  bool logits = false; // compute logits for this row
};

struct StepSeq {
  int32_t row_begin = 0;       // rows [row_begin, row_end) of Step::rows belong to this sequence
  int32_t row_end = 0;
  std::vector<int32_t> blocks; // block table: KV position j lives in blocks[j / block_size]
};

struct Step {
  std::vector<TokenRow> rows;
  std::vector<StepSeq> seqs;

  int32_t n_logit_rows() const {
    int32_t n = 0;
    for (const auto& r : rows) n += r.logits ? 1 : 0;
    return n;
  }
};

}  // namespace agentkv
