#include "adapter/peft_config.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "adapter/lora_target.h"
#include "format/gguf_cursor.h"  // quoted_name

namespace agentkv {
namespace {

using Json = nlohmann::ordered_json;  // file order matters for rank_pattern / alpha_pattern

struct DuplicateKey {
  std::string key;
};

// Parses with a check for duplicate top-level keys (nlohmann would keep the
// last one silently: "r": 8, ..., "r": 16 must not quietly mean 16).
Result<Json> parse_config_json(std::string_view text) {
  std::set<std::string> top;
  auto cb = [&top](int depth, Json::parse_event_t event, Json& parsed) -> bool {
    if (event == Json::parse_event_t::key && depth == 1 && parsed.is_string()) {
      if (!top.insert(parsed.get<std::string>()).second) throw DuplicateKey{parsed.get<std::string>()};
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), cb);
  } catch (const DuplicateKey& d) {
    return make_error(ErrorCode::kParse, "adapter_config.json: duplicate key ", quoted_name(d.key));
  } catch (const std::exception& e) {
    std::string_view w = e.what();
    if (const size_t c = w.find("] "); !w.empty() && w[0] == '[' && c != std::string_view::npos) w.remove_prefix(c + 2);
    const std::string q = quoted_name(w);
    return make_error(ErrorCode::kParse, "adapter_config.json is not valid JSON: ", q.substr(1, q.size() - 2));
  }
}

bool is_unset(const Json& cfg, const char* key) {
  if (!cfg.contains(key)) return true;
  const Json& v = cfg[key];
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) || ((v.is_array() || v.is_object()) && v.empty());
}

Result<int64_t> get_int(const Json& v, const std::string& what) {
  if (!v.is_number_integer()) {
    return make_error(ErrorCode::kInvalidArgument, "adapter_config.json: ", what, " must be an integer, got ",
                      v.type_name());
  }
  return v.get<int64_t>();
}

Result<double> get_number(const Json& v, const std::string& what) {
  if (!v.is_number()) {
    return make_error(ErrorCode::kInvalidArgument, "adapter_config.json: ", what, " must be a number, got ",
                      v.type_name());
  }
  const double d = v.get<double>();
  if (!std::isfinite(d)) return make_error(ErrorCode::kInvalidArgument, "adapter_config.json: ", what, " is not finite");
  return d;
}

Result<bool> get_bool(const Json& cfg, const char* key) {
  if (!cfg.contains(key) || cfg[key].is_null()) return false;
  if (!cfg[key].is_boolean()) {
    return make_error(ErrorCode::kInvalidArgument, "adapter_config.json: ", key, " must be true or false, got ",
                      cfg[key].type_name());
  }
  return cfg[key].get<bool>();
}

// PEFT's regex keys are not supported: a key must be a plain dotted module path.
Status check_pattern_key(const std::string& key, const char* field) {
  if (key.empty() || key.find_first_of("*+?()[]{}|^$\\") != std::string::npos) {
    return make_error(ErrorCode::kUnsupported, "adapter_config.json: ", field, " key ", quoted_name(key),
                      " is a regular expression; agentkv matches plain module names only (e.g. \"q_proj\" or "
                      "\"model.layers.3.self_attn.q_proj\")");
  }
  return Status::ok();
}

bool pattern_matches(const std::string& key, int32_t layer, LoraTarget t) {
  const std::string module = "model.layers." + std::to_string(layer) + "." + lora_target_hf_parent(t) + "." +
                             lora_target_peft_name(t);
  if (key == module) return true;
  return module.size() > key.size() && module.compare(module.size() - key.size(), key.size(), key) == 0 &&
         module[module.size() - key.size() - 1] == '.';
}

Status parse_targets(const Json& v, PeftLoraConfig* c) {
  if (v.is_string()) {
    if (v.get<std::string>() != "all-linear") {
      return make_error(ErrorCode::kUnsupported, "adapter_config.json: target_modules ", quoted_name(v.get<std::string>()),
                        " is a regular expression; use a list of module names or \"all-linear\"");
    }
    c->targets.fill(true);  // PEFT's all-linear: every Linear but the output layer
    return Status::ok();
  }
  if (!v.is_array() || v.empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "adapter_config.json: target_modules must be a non-empty list of module names or \"all-linear\"");
  }
  for (const Json& e : v) {
    if (!e.is_string()) {
      return make_error(ErrorCode::kInvalidArgument, "adapter_config.json: target_modules entries must be strings");
    }
    auto t = lora_target_from_peft(e.get<std::string>());
    if (!t) return make_error(ErrorCode::kUnsupported, "unsupported target module ", quoted_name(e.get<std::string>()));
    c->targets[static_cast<int32_t>(*t)] = true;
  }
  return Status::ok();
}

}  // namespace

int32_t PeftLoraConfig::rank_for(int32_t layer, LoraTarget t) const {
  for (const auto& [k, v] : rank_pattern)
    if (pattern_matches(k, layer, t)) return v;
  return r;
}

double PeftLoraConfig::alpha_for(int32_t layer, LoraTarget t) const {
  for (const auto& [k, v] : alpha_pattern)
    if (pattern_matches(k, layer, t)) return v;
  return lora_alpha;
}

bool PeftLoraConfig::transforms_layer(int32_t layer) const {
  if (!layers_to_transform) return true;
  for (int32_t l : *layers_to_transform)
    if (l == layer) return true;
  return false;
}

namespace {

// layers_to_transform: one layer or a list.
Status parse_layers(Json& cfg, PeftLoraConfig* c) {
  if (!is_unset(cfg, "layers_to_transform")) {
    const Json& v = cfg["layers_to_transform"];
    std::vector<int32_t> layers;
    for (const Json& e : v.is_array() ? v : Json::array({v})) {
      AKV_ASSIGN_OR_RETURN(int64_t l, get_int(e, "layers_to_transform entry"));
      if (l < 0 || l > INT32_MAX) {
        return make_error(ErrorCode::kInvalidArgument, "adapter_config.json: layers_to_transform entry ", l,
                          " is negative or too large");
      }
      layers.push_back(static_cast<int32_t>(l));
    }
    c->layers_to_transform = std::move(layers);
  }
  return Status::ok();
}

// rank_pattern and alpha_pattern, in file order.
Status parse_patterns(Json& cfg, PeftLoraConfig* c) {
  for (const char* field : {"rank_pattern", "alpha_pattern"}) {
    if (is_unset(cfg, field)) continue;
    const Json& v = cfg[field];
    if (!v.is_object()) {
      return make_error(ErrorCode::kInvalidArgument, "adapter_config.json: ", field, " must be an object");
    }
    for (auto it = v.begin(); it != v.end(); ++it) {
      AKV_RETURN_IF_ERROR(check_pattern_key(it.key(), field));
      const std::string what = std::string(field) + " " + quoted_name(it.key());
      if (field[0] == 'r') {
        AKV_ASSIGN_OR_RETURN(int64_t pr, get_int(it.value(), what));
        if (pr <= 0 || pr > 65536) {
          return make_error(ErrorCode::kInvalidArgument, "adapter_config.json: ", what, " = ", pr, " out of range");
        }
        c->rank_pattern.emplace_back(it.key(), static_cast<int32_t>(pr));
      } else {
        AKV_ASSIGN_OR_RETURN(double a, get_number(it.value(), what));
        c->alpha_pattern.emplace_back(it.key(), a);
      }
    }
  }
  return Status::ok();
}

// aLoRA's invocation tokens (an empty list: a plain LoRA).
Status parse_invocation(Json& cfg, PeftLoraConfig* c) {
  if (!is_unset(cfg, "alora_invocation_tokens")) {
    const Json& v = cfg["alora_invocation_tokens"];
    if (!v.is_array()) {
      return make_error(ErrorCode::kInvalidArgument, "adapter_config.json: alora_invocation_tokens must be a list of token ids");
    }
    for (const Json& e : v) {
      AKV_ASSIGN_OR_RETURN(int64_t id, get_int(e, "alora_invocation_tokens entry"));
      c->invocation_tokens.push_back(id);
    }
  } else if (cfg.contains("alora_invocation_tokens") && cfg["alora_invocation_tokens"].is_array()) {
    // An empty list is falsy to PEFT and to llama.cpp's converter: a plain LoRA.
  } else if (!is_unset(cfg, "invocation_string")) {
    return make_error(ErrorCode::kUnsupported,
                      "adapter_config.json: invocation_string without alora_invocation_tokens; tokenize it with the "
                      "base tokenizer and store the ids as alora_invocation_tokens");
  }
  return Status::ok();
}

}  // namespace

Result<PeftLoraConfig> peft_config_parse(std::string_view json_text) {
  AKV_ASSIGN_OR_RETURN(Json cfg, parse_config_json(json_text));
  if (!cfg.is_object())
    return make_error(ErrorCode::kInvalidArgument, "adapter_config.json must be a JSON object");
  PeftLoraConfig c;

  if (!cfg.contains("peft_type") || !cfg["peft_type"].is_string()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "adapter_config.json: peft_type missing (expected \"LORA\")");
  }
  if (cfg["peft_type"].get<std::string>() != "LORA") {
    return make_error(ErrorCode::kUnsupported, "adapter_config.json: peft_type ",
                      quoted_name(cfg["peft_type"].get<std::string>()), " is not supported (only LORA)");
  }
  if (!cfg.contains("r")) return make_error(ErrorCode::kInvalidArgument, "adapter_config.json: r missing");
  AKV_ASSIGN_OR_RETURN(int64_t r, get_int(cfg["r"], "r"));
  if (r <= 0 || r > 65536)
    return make_error(ErrorCode::kInvalidArgument, "adapter_config.json: r = ", r, " out of range");
  c.r = static_cast<int32_t>(r);
  if (cfg.contains("lora_alpha") && !cfg["lora_alpha"].is_null()) {
    AKV_ASSIGN_OR_RETURN(c.lora_alpha, get_number(cfg["lora_alpha"], "lora_alpha"));
  }
  AKV_ASSIGN_OR_RETURN(c.use_rslora, get_bool(cfg, "use_rslora"));
  // fan_in_fan_out only matters for Conv1D (GPT-2) layers; for nn.Linear PEFT
  // warns and forces it to False, so the saved matrices are in the standard
  // layout either way. It is read for its type only.
  AKV_RETURN_IF_ERROR(get_bool(cfg, "fan_in_fan_out").status());

  if (!cfg.contains("target_modules") || cfg["target_modules"].is_null()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "adapter_config.json: target_modules missing (PEFT's per-architecture default is not "
                      "guessed; list the modules)");
  }
  AKV_RETURN_IF_ERROR(parse_targets(cfg["target_modules"], &c));

  // Options that would need more than A/B matrices per Linear.
  for (const char* key : {"use_dora", "lora_bias"}) {
    AKV_ASSIGN_OR_RETURN(bool on, get_bool(cfg, key));
    if (on) return make_error(ErrorCode::kUnsupported, "adapter_config.json: ", key, " is not supported");
  }
  if (cfg.contains("bias") && !cfg["bias"].is_null() && cfg["bias"] != "none") {
    return make_error(ErrorCode::kUnsupported, "adapter_config.json: bias ", cfg["bias"].dump(),
                      " is not supported (only \"none\")");
  }
  for (const char* key : {"modules_to_save", "exclude_modules", "layer_replication", "target_parameters",
                          "trainable_token_indices"}) {
    if (!is_unset(cfg, key)) {
      return make_error(ErrorCode::kUnsupported, "adapter_config.json: ", key, " is not supported");
    }
  }

  AKV_RETURN_IF_ERROR(parse_layers(cfg, &c));
  AKV_RETURN_IF_ERROR(parse_patterns(cfg, &c));
  AKV_RETURN_IF_ERROR(parse_invocation(cfg, &c));
  return c;
}

}  // namespace agentkv
