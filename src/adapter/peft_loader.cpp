#include "adapter/peft_loader.h"

#include <sys/stat.h>

#include <map>

#include "adapter/adapter_check.h"
#include "adapter/adapter_identity.h"
#include "adapter/lora_target.h"
#include "adapter/peft_config.h"
#include "format/gguf_cursor.h"  // quoted_name
#include "format/safetensors.h"
#include "util/mmap.h"

namespace agentkv {
namespace {

constexpr uint64_t kMaxConfigBytes = 16u << 20;

struct PeftName {
  int32_t layer = 0;
  LoraTarget target = LoraTarget::kQ;
  bool is_b = false;
};

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// "<prefix>layers.{i}.{self_attn|mlp}.{x}_proj.lora_{A|B}.weight"
Result<PeftName> parse_peft_name(const std::string& name, int32_t n_layers) {
  PeftName out;
  std::string_view s = name;
  if (ends_with(s, ".lora_A.weight")) {
    s.remove_suffix(14);
  } else if (ends_with(s, ".lora_B.weight")) {
    s.remove_suffix(14);
    out.is_b = true;
  } else if (s.find("lora_embedding_") != std::string_view::npos) {
    return make_error(ErrorCode::kUnsupported, "unsupported target module 'embed_tokens' (tensor ", quoted_name(name), ")");
  } else {
    return make_error(ErrorCode::kUnsupported, "unexpected tensor ", quoted_name(name),
                      " (only lora_A / lora_B weights: DoRA, biases and modules_to_save are not supported)");
  }
  const size_t dot = s.rfind('.');
  const std::string_view module = dot == std::string_view::npos ? s : s.substr(dot + 1);
  auto target = lora_target_from_peft(module);
  if (!target) {
    return make_error(ErrorCode::kUnsupported, "unsupported target module ", quoted_name(module), " (tensor ",
                      quoted_name(name), ")");
  }
  out.target = *target;
  // What is left: "<prefix>layers.{i}.{parent}".
  std::string_view rest = s.substr(0, dot);
  const std::string parent = std::string(".") + lora_target_hf_parent(*target);
  size_t at = rest.rfind("layers.");
  if (!ends_with(rest, parent) || at == std::string_view::npos || (at > 0 && rest[at - 1] != '.')) {
    return make_error(ErrorCode::kInvalidArgument, "unexpected tensor ", quoted_name(name), " (expected ...layers.N",
                      parent, ".", module, ".lora_A.weight)");
  }
  std::string_view digits = rest.substr(at + 7, rest.size() - parent.size() - (at + 7));
  uint64_t layer = 0;
  if (digits.empty() || digits.size() > 9) {
    return make_error(ErrorCode::kInvalidArgument, "tensor ", quoted_name(name), ": bad layer index");
  }
  for (char ch : digits) {
    if (ch < '0' || ch > '9') return make_error(ErrorCode::kInvalidArgument, "tensor ", quoted_name(name), ": bad layer index");
    layer = layer * 10 + static_cast<uint64_t>(ch - '0');
  }
  if (layer >= static_cast<uint64_t>(n_layers)) {
    return make_error(ErrorCode::kInvalidArgument, "layer index ", layer, " past the base model's ", n_layers,
                      " layers (tensor ", quoted_name(name), ")");
  }
  out.layer = static_cast<int32_t>(layer);
  return out;
}

}  // namespace

Result<Adapter> load_peft_adapter_bytes(std::string_view config_json, std::span<const uint8_t> safetensors,
                                        const ModelSpec& spec, int32_t n_vocab,
                                        std::optional<AdapterKind> kind_override, const std::string& source) {
  AKV_ASSIGN_OR_RETURN(PeftLoraConfig cfg, peft_config_parse(config_json));
  auto parsed = SafetensorsFile::parse(safetensors);
  if (!parsed.is_ok()) return parsed.status().with_context("adapter_model.safetensors");
  const SafetensorsFile& st = *parsed;
  if (cfg.layers_to_transform) {
    for (int32_t l : *cfg.layers_to_transform) {
      if (l >= spec.n_layers) {
        return make_error(ErrorCode::kInvalidArgument, "layers_to_transform lists layer ", l, ", past the base model's ",
                          spec.n_layers, " layers");
      }
    }
  }

  // (layer, target) -> {A, B} tensors.
  std::map<std::pair<int32_t, int32_t>, std::array<const SafetensorsTensor*, 2>> pairs;
  for (const SafetensorsTensor& t : st.tensors()) {
    AKV_ASSIGN_OR_RETURN(PeftName pn, parse_peft_name(t.name, spec.n_layers));
    if (!cfg.targets[static_cast<int32_t>(pn.target)]) {
      return make_error(ErrorCode::kInvalidArgument, "tensor ", quoted_name(t.name), " adapts ",
                        lora_target_peft_name(pn.target), ", which target_modules does not list");
    }
    if (!cfg.transforms_layer(pn.layer)) {
      return make_error(ErrorCode::kInvalidArgument, "tensor ", quoted_name(t.name), " is in layer ", pn.layer,
                        ", which layers_to_transform excludes");
    }
    auto& slot = pairs[{pn.layer, static_cast<int32_t>(pn.target)}][pn.is_b ? 1 : 0];
    if (slot) {
      return make_error(ErrorCode::kInvalidArgument, "tensors ", quoted_name(slot->name), " and ", quoted_name(t.name),
                        " are both ", pn.is_b ? "lora_B" : "lora_A", " of layer ", pn.layer, " ",
                        lora_target_peft_name(pn.target));
    }
    slot = &t;
  }

  Adapter a;
  a.source = source;
  a.rank = cfg.r;
  a.layers.resize(static_cast<size_t>(spec.n_layers));
  const bool permute = base_has_permuted_qk(spec);
  for (int32_t layer = 0; layer < spec.n_layers; ++layer) {
    if (!cfg.transforms_layer(layer)) continue;
    for (LoraTarget target : kAllLoraTargets) {
      if (!cfg.targets[static_cast<int32_t>(target)]) continue;
      auto it = pairs.find({layer, static_cast<int32_t>(target)});
      const SafetensorsTensor* ta = it == pairs.end() ? nullptr : it->second[0];
      const SafetensorsTensor* tb = it == pairs.end() ? nullptr : it->second[1];
      if (!ta || !tb) {
        std::string missing = peft_tensor_name(layer, target, false);
        if (ta && !tb) missing = ta->name.substr(0, ta->name.size() - 14) + ".lora_B.weight";
        if (tb && !ta) missing = tb->name.substr(0, tb->name.size() - 14) + ".lora_A.weight";
        return make_error(ErrorCode::kInvalidArgument, "missing tensor ", quoted_name(missing), " (target_modules lists ",
                          lora_target_peft_name(target), ")");
      }
      LoraPairShapes p{layer, target, ta->name, tb->name, ta->shape, tb->shape};
      AKV_ASSIGN_OR_RETURN(int32_t rank, check_lora_pair(spec, p, cfg.rank_for(layer, target)));
      LoraMatrix& m = a.layers[static_cast<size_t>(layer)].at(target);
      m.rank = rank;
      m.d_in = ta->shape[1];
      m.d_out = tb->shape[0];
      m.scale = lora_scale(cfg.alpha_for(layer, target), rank, cfg.use_rslora);
      AKV_ASSIGN_OR_RETURN(m.a, st.tensor_f32(ta->name));
      AKV_ASSIGN_OR_RETURN(m.b, st.tensor_f32(tb->name));
      if (permute && (target == LoraTarget::kQ || target == LoraTarget::kK)) {
        const int32_t heads = target == LoraTarget::kQ ? spec.n_heads : spec.n_kv_heads;
        AKV_RETURN_IF_ERROR(permute_rows_for_rope(&m.b, m.d_out, m.rank, heads));
      }
    }
  }

  AKV_RETURN_IF_ERROR(check_invocation_tokens(cfg.invocation_tokens, n_vocab, &a.invocation_tokens));
  AKV_RETURN_IF_ERROR(resolve_adapter_kind(&a, kind_override));
  const auto* cfg_bytes = reinterpret_cast<const uint8_t*>(config_json.data());
  a.id = adapter_content_id(a.kind, {{"adapter_config.json", {cfg_bytes, config_json.size()}},
                                     {"adapter_model.safetensors", safetensors}});
  return a;
}

Result<Adapter> load_peft_adapter(const std::string& dir, const ModelSpec& spec, int32_t n_vocab,
                                  std::optional<AdapterKind> kind_override) {
  const std::string cfg_path = dir + "/adapter_config.json";
  const std::string st_path = dir + "/adapter_model.safetensors";
  auto cfg = MappedFile::open(cfg_path);
  if (!cfg.is_ok()) return cfg.status();
  if (cfg->size() > kMaxConfigBytes) {
    return make_error(ErrorCode::kOutOfRange, cfg_path, ": ", cfg->size(), " bytes, more than the ", kMaxConfigBytes,
                      " a config may have");
  }
  struct stat sb {};
  if (::stat(st_path.c_str(), &sb) != 0 && ::stat((dir + "/adapter_model.bin").c_str(), &sb) == 0) {
    return make_error(ErrorCode::kUnsupported, dir,
                      ": adapter_model.bin (a pickle) is not supported; save the adapter with safe_serialization=True");
  }
  auto st = MappedFile::open(st_path);
  if (!st.is_ok()) return st.status();
  const std::string_view text(reinterpret_cast<const char*>(cfg->data()), cfg->size());
  auto a = load_peft_adapter_bytes(text, st->bytes(), spec, n_vocab, kind_override, dir);
  if (!a.is_ok()) return a.status().with_context(dir);
  return a;
}

}  // namespace agentkv
