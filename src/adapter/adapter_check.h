// Checks and finishing steps both loaders (PEFT and GGUF LoRA) share, so the
// two formats fail with the same messages and end in the same Adapter.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "adapter/adapter.h"
#include "model/model_spec.h"
#include "util/status.h"

namespace agentkv {

// One A/B pair as found in a file, shapes row-major (PEFT order):
// A (rank, d_in), B (d_out, rank).
struct LoraPairShapes {
  int32_t layer = 0;
  LoraTarget target = LoraTarget::kQ;
  std::string a_name, b_name;  // tensor names, for messages
  std::vector<int64_t> a_shape, b_shape;
};

// Both 2-D, A's rank equals B's rank (and expected_rank when > 0), d_in and
// d_out equal the base projection's. Returns the rank.
Result<int32_t> check_lora_pair(const ModelSpec& spec, const LoraPairShapes& p, int32_t expected_rank);

// What check_lora_pair's message holds when an adapter's shapes do not fit
// the base (an adapter made for another model). The server tells a client
// that much and no more, since the rest quotes the file's tensor names.
inline constexpr std::string_view kWrongBaseShape = "wrong base shape: ";

// "invocation token X outside the vocabulary (N)" for any id not in [0, n_vocab).
Status check_invocation_tokens(const std::vector<int64_t>& ids, int32_t n_vocab, std::vector<int32_t>* out);

// PEFT's scaling: alpha / rank, or alpha / sqrt(rank) with use_rslora.
float lora_scale(double alpha, int32_t rank, bool use_rslora);

// Applies an explicit kind (from the registry / CLI) over what the file said.
// alora needs invocation tokens; lora and icarus drop them (a plain LoRA runs
// on every token; an ICaRus decoder has no activation point).
Status resolve_adapter_kind(Adapter* a, std::optional<AdapterKind> kind_override);

// True when llama.cpp's converter permuted the q/k rows of this base (llama,
// mistral: adjacent-pair RoPE), so a PEFT adapter's B of q_proj / k_proj needs
// the same permutation.
bool base_has_permuted_qk(const ModelSpec& spec);

// convert_hf_to_gguf.py LlamaModel.permute applied to the rows of a
// (rows, cols) row-major matrix:
//   w.reshape(n_head, 2, rows // n_head // 2, cols).swapaxes(1, 2).reshape(rows, cols)
// i.e. within each head, the rows [first half | second half] are interleaved.
// Error if rows is not a multiple of 2 * n_head.
Status permute_rows_for_rope(std::vector<float>* w, int64_t rows, int64_t cols, int32_t n_head);

}  // namespace agentkv
