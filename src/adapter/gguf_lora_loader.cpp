#include "adapter/gguf_lora_loader.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "adapter/adapter_check.h"
#include "adapter/adapter_identity.h"
#include "adapter/lora_target.h"
#include "format/ggml_type.h"
#include "format/gguf.h"
#include "format/gguf_cursor.h"  // quoted_name
#include "util/mmap.h"

namespace agentkv {
namespace {

struct GgufLoraName {
  int32_t layer = 0;
  LoraTarget target = LoraTarget::kQ;
  bool is_b = false;
};

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Returns nullopt for tensors llama.cpp skips (norm vectors from mergekit).
Result<std::optional<GgufLoraName>> parse_gguf_name(const std::string& name, int32_t n_layers) {
  GgufLoraName out;
  std::string_view s = name;
  if (ends_with(s, ".lora_a")) {
    s.remove_suffix(7);
  } else if (ends_with(s, ".lora_b")) {
    s.remove_suffix(7);
    out.is_b = true;
  } else if (ends_with(s, "_norm.weight")) {
    // llama.cpp ignores these too ("most adapters still work fine without it").
    return std::optional<GgufLoraName>();
  } else {
    return make_error(ErrorCode::kInvalidArgument, "unexpected tensor ", quoted_name(name),
                      " (LoRA tensors end in .lora_a / .lora_b)");
  }
  if (s == "token_embd.weight" || s == "output.weight") {
    return make_error(ErrorCode::kUnsupported, "unsupported target module ", quoted_name(s.substr(0, s.size() - 7)));
  }
  if (s.substr(0, 4) != "blk." || !ends_with(s, ".weight")) {
    return make_error(ErrorCode::kInvalidArgument, "unexpected tensor ", quoted_name(name),
                      " (expected blk.N.<module>.weight.lora_a/b)");
  }
  s.remove_prefix(4);
  s.remove_suffix(7);
  const size_t dot = s.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot > 9) {
    return make_error(ErrorCode::kInvalidArgument, "tensor ", quoted_name(name), ": bad layer index");
  }
  uint64_t layer = 0;
  for (char ch : s.substr(0, dot)) {
    if (ch < '0' || ch > '9') return make_error(ErrorCode::kInvalidArgument, "tensor ", quoted_name(name), ": bad layer index");
    layer = layer * 10 + static_cast<uint64_t>(ch - '0');
  }
  auto target = lora_target_from_gguf(s.substr(dot + 1));
  if (!target) {
    return make_error(ErrorCode::kUnsupported, "unsupported target module ", quoted_name(s.substr(dot + 1)),
                      " (tensor ", quoted_name(name), ")");
  }
  if (layer >= static_cast<uint64_t>(n_layers)) {
    return make_error(ErrorCode::kInvalidArgument, "layer index ", layer, " past the base model's ", n_layers,
                      " layers (tensor ", quoted_name(name), ")");
  }
  out.layer = static_cast<int32_t>(layer);
  out.target = *target;
  return std::optional<GgufLoraName>(out);
}

std::vector<int64_t> row_major(const std::vector<int64_t>& ne) { return {ne.rbegin(), ne.rend()}; }

Result<std::vector<float>> dequantize_all(const GgufFile& f, const GgufTensorInfo& t) {
  auto traits = ggml_type_traits(static_cast<uint32_t>(t.type));
  if (!traits || !traits->can_dequantize) {
    return make_error(ErrorCode::kUnsupported, "tensor ", quoted_name(t.name), " has type ",
                      traits ? traits->name : "?", ", which agentkv cannot dequantize");
  }
  const int64_t ne0 = t.ne.empty() ? 1 : t.ne[0];
  AKV_ASSIGN_OR_RETURN(uint64_t row_bytes, ggml_row_bytes(t.type, ne0));
  const uint64_t rows = t.n_elements / static_cast<uint64_t>(ne0);
  std::vector<float> out(static_cast<size_t>(t.n_elements));
  const std::span<const uint8_t> data = f.tensor_data(t);
  for (uint64_t r = 0; r < rows; ++r) {
    AKV_RETURN_IF_ERROR(dequantize_row(t.type, data.data() + r * row_bytes, out.data() + r * ne0, ne0));
  }
  return out;
}

}  // namespace

Result<Adapter> load_gguf_lora_adapter_bytes(std::span<const uint8_t> bytes, const ModelSpec& spec, int32_t n_vocab,
                                             std::optional<AdapterKind> kind_override, const std::string& source) {
  AKV_ASSIGN_OR_RETURN(GgufFile f, GgufFile::parse(bytes));
  const GgufValue* type = f.find("general.type");
  if (!type || type->type != GgufType::kString) {
    return make_error(ErrorCode::kInvalidArgument, "not a LoRA adapter: general.type is missing (a base model file?)");
  }
  if (type->s != "adapter") {
    return make_error(ErrorCode::kInvalidArgument, "not a LoRA adapter: general.type is ", quoted_name(type->s),
                      ", expected 'adapter'");
  }
  AKV_ASSIGN_OR_RETURN(std::string adapter_type, f.get_string("adapter.type"));
  if (adapter_type != "lora") {
    return make_error(ErrorCode::kUnsupported, "adapter.type is ", quoted_name(adapter_type), ", expected 'lora'");
  }
  AKV_ASSIGN_OR_RETURN(std::string arch, f.get_string("general.architecture"));
  if (arch != spec.arch.name) {
    return make_error(ErrorCode::kInvalidArgument, "adapter is for architecture ", quoted_name(arch),
                      ", the base model is '", spec.arch.name, "'");
  }
  double alpha = 0;
  if (f.find("adapter.lora.alpha")) {
    AKV_ASSIGN_OR_RETURN(alpha, f.get_float("adapter.lora.alpha"));
  }
  if (!std::isfinite(alpha)) return make_error(ErrorCode::kInvalidArgument, "adapter.lora.alpha is not finite");
  std::vector<int64_t> invocation;
  if (const GgufValue* v = f.find("adapter.alora.invocation_tokens")) {
    if (v->type != GgufType::kArray || (v->elem_type != GgufType::kUint32 && v->elem_type != GgufType::kInt32)) {
      return make_error(ErrorCode::kInvalidArgument,
                        "adapter.alora.invocation_tokens must be an array of u32 (or i32) token ids");
    }
    AKV_ASSIGN_OR_RETURN(invocation, f.get_int_array("adapter.alora.invocation_tokens"));
  }

  std::map<std::pair<int32_t, int32_t>, std::array<const GgufTensorInfo*, 2>> pairs;
  for (const GgufTensorInfo& t : f.tensors()) {
    AKV_ASSIGN_OR_RETURN(std::optional<GgufLoraName> n, parse_gguf_name(t.name, spec.n_layers));
    if (!n) continue;
    auto& slot = pairs[{n->layer, static_cast<int32_t>(n->target)}][n->is_b ? 1 : 0];
    slot = &t;  // names are unique in a parsed GGUF
  }

  Adapter a;
  a.source = source;
  a.layers.resize(static_cast<size_t>(spec.n_layers));
  for (const auto& [key, ab] : pairs) {
    const auto [layer, ti] = key;
    const LoraTarget target = static_cast<LoraTarget>(ti);
    if (!ab[0] || !ab[1]) {
      const std::string have = (ab[0] ? ab[0] : ab[1])->name;
      return make_error(ErrorCode::kInvalidArgument, "missing tensor ",
                        quoted_name(have.substr(0, have.size() - 1) + (ab[0] ? "b" : "a")));
    }
    LoraPairShapes p{layer, target, ab[0]->name, ab[1]->name, row_major(ab[0]->ne), row_major(ab[1]->ne)};
    AKV_ASSIGN_OR_RETURN(int32_t rank, check_lora_pair(spec, p, 0));
    LoraMatrix& m = a.layers[static_cast<size_t>(layer)].at(target);
    m.rank = rank;
    m.d_in = p.a_shape[1];
    m.d_out = p.b_shape[0];
    // llama.cpp: scale = alpha ? alpha / rank : 1 (rank from B's ne[0]).
    m.scale = alpha != 0 ? lora_scale(alpha, rank, false) : 1.0f;
    AKV_ASSIGN_OR_RETURN(m.a, dequantize_all(f, *ab[0]));
    AKV_ASSIGN_OR_RETURN(m.b, dequantize_all(f, *ab[1]));
    a.rank = std::max(a.rank, rank);
  }
  if (pairs.empty()) return make_error(ErrorCode::kInvalidArgument, "the adapter has no lora_a / lora_b tensors");

  AKV_RETURN_IF_ERROR(check_invocation_tokens(invocation, n_vocab, &a.invocation_tokens));
  AKV_RETURN_IF_ERROR(resolve_adapter_kind(&a, kind_override));
  a.id = adapter_content_id(a.kind, {{"adapter.gguf", bytes}});
  return a;
}

Result<Adapter> load_gguf_lora_adapter(const std::string& path, const ModelSpec& spec, int32_t n_vocab,
                                       std::optional<AdapterKind> kind_override) {
  AKV_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  auto a = load_gguf_lora_adapter_bytes(file.bytes(), spec, n_vocab, kind_override, path);
  if (!a.is_ok()) return a.status().with_context(path);
  return a;
}

}  // namespace agentkv
