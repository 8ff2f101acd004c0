#include "server/serve_config.h"

#include <set>

#include "server/models_handler.h"
#include "sharing/scheme.h"

namespace agentkv::server {
namespace {

using json = nlohmann::json;

constexpr const char* kSpecForm = "NAME=PATH[:lora|:alora|:icarus]";

Result<AdapterSpec> spec_from_object(const json& o) {
  AdapterSpec s;
  for (const auto& [key, value] : o.items()) {
    std::string* out = key == "name" ? &s.name : key == "path" ? &s.path : key == "kind" ? &s.kind : nullptr;
    if (!out) {
      return make_error(ErrorCode::kInvalidArgument, "adapter entry: unknown key '", key,
                        "' (expected name, path and optionally kind)");
    }
    if (value.is_null() && key == "kind") continue;
    if (!value.is_string()) {
      return make_error(ErrorCode::kInvalidArgument, "adapter entry: '", key, "' must be a string, got ",
                        value.type_name());
    }
    *out = value.get<std::string>();
  }
  if (s.name.empty() || s.path.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "adapter entry ", o.dump(), ": needs a non-empty name and path");
  }
  if (!s.kind.empty() && !is_adapter_kind(s.kind)) {
    return make_error(ErrorCode::kInvalidArgument, "adapter '", s.name, "': unknown kind '", s.kind,
                      "' (expected lora, alora or icarus)");
  }
  return s;
}

Result<AdapterSpec> spec_from_item(const json& item) {
  if (item.is_string()) return parse_adapter_spec(item.get<std::string>());
  if (item.is_object()) return spec_from_object(item);
  return make_error(ErrorCode::kInvalidArgument, "adapter entry: expected a \"", kSpecForm,
                    "\" string or a {\"name\", \"path\", \"kind\"} object, got ", item.type_name());
}

}  // namespace

Result<AdapterSpec> parse_adapter_spec(std::string_view spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == spec.size()) {
    return make_error(ErrorCode::kInvalidArgument, "--adapter wants ", kSpecForm, ", got '", std::string(spec), "'");
  }
  AdapterSpec s;
  s.name = std::string(spec.substr(0, eq));
  std::string_view path = spec.substr(eq + 1);
  if (const size_t colon = path.rfind(':'); colon != std::string_view::npos) {
    const std::string_view kind = path.substr(colon + 1);
    if (is_adapter_kind(kind)) {
      s.kind = std::string(kind);
      path = path.substr(0, colon);
    }
  }
  if (path.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "--adapter wants ", kSpecForm, ", got '", std::string(spec),
                      "' (no path)");
  }
  s.path = std::string(path);
  return s;
}

Result<std::vector<AdapterSpec>> adapter_specs_from_json(const json& v) {
  std::vector<AdapterSpec> out;
  if (v.is_array()) {
    for (const json& item : v) {
      AKV_ASSIGN_OR_RETURN(AdapterSpec s, spec_from_item(item));
      out.push_back(std::move(s));
    }
    return out;
  }
  AKV_ASSIGN_OR_RETURN(AdapterSpec s, spec_from_item(v));
  out.push_back(std::move(s));
  return out;
}

Status check_adapter_specs(const std::vector<AdapterSpec>& specs, const std::string& base_name) {
  std::set<std::string> names;
  for (const AdapterSpec& s : specs) {
    if (s.name.empty() || s.path.empty()) {
      return make_error(ErrorCode::kInvalidArgument, "--adapter: an adapter needs a name and a path");
    }
    if (!s.kind.empty() && !is_adapter_kind(s.kind)) {
      return make_error(ErrorCode::kInvalidArgument, "--adapter ", s.name, ": unknown kind '", s.kind,
                        "' (expected lora, alora or icarus)");
    }
    if (s.name == base_name) {
      return make_error(ErrorCode::kInvalidArgument, "--adapter ", s.name,
                        ": the name is the base model's served name (see --served-model-name)");
    }
    if (!names.insert(s.name).second) {
      return make_error(ErrorCode::kInvalidArgument, "--adapter: the name '", s.name, "' is given twice");
    }
  }
  return Status::ok();
}

Status check_kv_sharing(const std::string& scheme) {
  const std::string why = kv_sharing_error(scheme);
  if (why.empty()) return Status::ok();
  return make_error(ErrorCode::kInvalidArgument, "--kv-sharing: ", why);
}

}  // namespace agentkv::server
