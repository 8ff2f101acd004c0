#include "adapter/adapter_check.h"

#include <algorithm>
#include <cmath>

#include "adapter/lora_target.h"
#include "format/gguf_cursor.h"  // quoted_name

namespace agentkv {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

}  // namespace

Result<int32_t> check_lora_pair(const ModelSpec& spec, const LoraPairShapes& p, int32_t expected_rank) {
  const char* mod = lora_target_peft_name(p.target);
  const LoraBaseShape base = lora_base_shape(spec, p.target);
  const std::string base_str = shape_str({base.d_out, base.d_in});
  if (p.a_shape.size() != 2) {
    return make_error(ErrorCode::kInvalidArgument, "tensor ", quoted_name(p.a_name), " has shape ",
                      shape_str(p.a_shape), ", lora_A must be 2-D (rank, d_in)");
  }
  if (p.b_shape.size() != 2) {
    return make_error(ErrorCode::kInvalidArgument, "tensor ", quoted_name(p.b_name), " has shape ",
                      shape_str(p.b_shape), ", lora_B must be 2-D (d_out, rank)");
  }
  const int64_t rank_a = p.a_shape[0], rank_b = p.b_shape[1];
  if (p.a_shape[1] != base.d_in) {
    return make_error(ErrorCode::kInvalidArgument, kWrongBaseShape, quoted_name(p.a_name), " (lora_A) is ",
                      shape_str(p.a_shape), ", the base ", mod, " is ", base_str, " (d_out, d_in), so d_in must be ",
                      base.d_in);
  }
  if (p.b_shape[0] != base.d_out) {
    return make_error(ErrorCode::kInvalidArgument, kWrongBaseShape, quoted_name(p.b_name), " (lora_B) is ",
                      shape_str(p.b_shape), ", the base ", mod, " is ", base_str, " (d_out, d_in), so d_out must be ",
                      base.d_out);
  }
  if (rank_a != rank_b) {
    return make_error(ErrorCode::kInvalidArgument, "rank mismatch: layer ", p.layer, " ", mod, " lora_A ",
                      shape_str(p.a_shape), " has rank ", rank_a, ", lora_B ", shape_str(p.b_shape), " has rank ",
                      rank_b);
  }
  if (rank_a <= 0) {
    return make_error(ErrorCode::kInvalidArgument, "layer ", p.layer, " ", mod, " has rank 0");
  }
  if (expected_rank > 0 && rank_a != expected_rank) {
    return make_error(ErrorCode::kInvalidArgument, "rank mismatch: layer ", p.layer, " ", mod, " has rank ", rank_a,
                      ", the config says ", expected_rank);
  }
  if (rank_a > base.d_in || rank_a > base.d_out) {
    // Not wrong, but a rank above min(d_in, d_out) is a sign of a mixed-up file,
    // and it bounds the allocation a hostile file can ask for.
    return make_error(ErrorCode::kInvalidArgument, "layer ", p.layer, " ", mod, " has rank ", rank_a,
                      ", more than the base projection's smaller side ", std::min(base.d_in, base.d_out));
  }
  return static_cast<int32_t>(rank_a);
}

Status check_invocation_tokens(const std::vector<int64_t>& ids, int32_t n_vocab, std::vector<int32_t>* out) {
  out->clear();
  for (int64_t id : ids) {
    if (id < 0 || id >= n_vocab) {
      return make_error(ErrorCode::kInvalidArgument, "invocation token ", id, " outside the vocabulary (", n_vocab,
                        ")");
    }
    out->push_back(static_cast<int32_t>(id));
  }
  return Status::ok();
}

float lora_scale(double alpha, int32_t rank, bool use_rslora) {
  return static_cast<float>(use_rslora ? alpha / std::sqrt(static_cast<double>(rank)) : alpha / rank);
}

Status resolve_adapter_kind(Adapter* a, std::optional<AdapterKind> kind_override) {
  if (!kind_override) {
    a->kind = a->invocation_tokens.empty() ? AdapterKind::kLora : AdapterKind::kAlora;
    return Status::ok();
  }
  if (*kind_override == AdapterKind::kAlora && a->invocation_tokens.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "kind alora needs invocation tokens, and ", a->source,
                      " has none (alora_invocation_tokens / adapter.alora.invocation_tokens)");
  }
  a->kind = *kind_override;
  if (a->kind != AdapterKind::kAlora) a->invocation_tokens.clear();
  return Status::ok();
}

bool base_has_permuted_qk(const ModelSpec& spec) { return spec.arch.rope_style == RopeStyle::kNormal; }

Status permute_rows_for_rope(std::vector<float>* w, int64_t rows, int64_t cols, int32_t n_head) {
  if (n_head <= 0 || rows % (2 * static_cast<int64_t>(n_head)) != 0) {
    return make_error(ErrorCode::kInvalidArgument, "cannot permute ", rows, " rows for RoPE over ", n_head,
                      " heads (rows must be a multiple of 2 x heads)");
  }
  if (static_cast<int64_t>(w->size()) != rows * cols) {
    return make_error(ErrorCode::kInternal, "permute_rows_for_rope: ", w->size(), " values for ", rows, " x ", cols);
  }
  // Source layout (n_head, 2, half, cols), destination (n_head, half, 2, cols):
  // destination row h*2*half + i*2 + j comes from source row h*2*half + j*half + i.
  const int64_t half = rows / n_head / 2;
  std::vector<float> out(w->size());
  for (int64_t h = 0; h < n_head; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t dst = h * 2 * half + i * 2 + j;
        const int64_t src = h * 2 * half + j * half + i;
        std::copy_n(w->data() + src * cols, cols, out.data() + dst * cols);
      }
    }
  }
  *w = std::move(out);
  return Status::ok();
}

}  // namespace agentkv
