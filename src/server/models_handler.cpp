#include "server/models_handler.h"

#include <optional>

#include "adapter/adapter_check.h"
#include "server/adapter_path.h"
#include "sharing/scheme.h"

namespace agentkv::server {
namespace {

using json = nlohmann::json;

// A required string field; absent, null and "" are "not provided" (vLLM
// rejects an empty lora_name or lora_path the same way as a missing one).
std::optional<ApiError> read_required(const json& obj, const char* key, const std::string& missing_message,
                                      std::string& out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return bad_request(key, missing_message);
  if (!it->is_string()) return bad_request(key, std::string(key) + " must be a string");
  out = it->get<std::string>();
  if (out.empty()) return bad_request(key, missing_message);
  return std::nullopt;
}

const char* const kLoadMissing = "Both 'lora_name' and 'lora_path' must be provided.";

// What a client learns of a failed load: the kind of failure, never the
// loader's message (it may quote the file).
ApiError load_error(const Status& st, const LoadAdapterRequest& r) {
  if (st.code() == ErrorCode::kNotFound) {  // vLLM answers "No adapter found" with 404
    ApiError e = bad_request("lora_path", "No adapter found at lora_path '" + r.path + "'");
    e.status = 404;
    e.code = "adapter_not_found";
    return e;
  }
  if (st.code() == ErrorCode::kUnavailable || st.code() == ErrorCode::kResourceExhausted) {
    return api_error_from_status(st);
  }
  if (st.message().find(kWrongBaseShape) != std::string::npos) {
    return bad_request("lora_path", "Cannot load adapter '" + r.name + "' from lora_path '" + r.path +
                                        "': its tensor shapes do not fit this base model (an adapter made for "
                                        "another base); the server log names the tensor");
  }
  return bad_request("lora_path",
                     "Cannot load adapter '" + r.name + "' from lora_path '" + r.path +
                         "'. It is not an adapter this server can load (a PEFT directory or a GGUF LoRA "
                         "file for this base model), or an invalid name; the server log has the "
                         "details");
}

ApiError adapter_not_found(const std::string& name) {
  ApiError e;
  e.status = 404;
  e.param = "lora_name";
  e.code = "model_not_found";
  e.message = "The lora adapter '" + name + "' cannot be found.";
  return e;
}

}  // namespace

bool is_adapter_kind(std::string_view s) { return s == "lora" || s == "alora" || s == "icarus"; }

bool is_kv_sharing_scheme(std::string_view s) { return sharing_scheme_get(s) != nullptr; }

std::string kv_sharing_error(std::string_view s) {
  const Result<const SharingScheme*> found = sharing_scheme_find(s);
  return found.is_ok() ? std::string() : found.status().message();
}

std::vector<std::string> served_model_names(const ServingEngine& engine, const std::string& base_name) {
  std::vector<std::string> names = {base_name};
  for (const ServedModel& m : engine.models()) {
    if (!m.name.empty()) names.push_back(m.name);
  }
  return names;
}

ApiResult<std::string> resolve_model(const ServingEngine& engine, const std::string& base_name,
                                     const std::string& model) {
  if (model.empty() || model == base_name) return std::string();
  for (const ServedModel& m : engine.models()) {
    if (!m.name.empty() && m.name == model) return model;
  }
  return model_not_found(model, served_model_names(engine, base_name));
}

json models_list(const std::string& base_name, const ServingEngine* engine, int64_t created) {
  json base = {{"id", base_name}, {"object", "model"}, {"created", created}, {"owned_by", "agentkv"},
               {"kind", "base"}};
  json data = json::array();
  if (!engine) {
    data.push_back(std::move(base));
    return {{"object", "list"}, {"data", std::move(data)}};
  }
  base["max_model_len"] = engine->max_model_len();
  data.push_back(std::move(base));
  for (const ServedModel& m : engine->models()) {
    if (m.name.empty()) continue;  // the base, listed first under its served name
    data.push_back({{"id", m.name},
                    {"object", "model"},
                    {"created", created},
                    {"owned_by", "agentkv"},
                    {"parent", base_name},  // as vLLM lists LoRA modules
                    {"kind", m.kind},
                    {"adapter_id", m.id},
                    {"rank", m.rank},
                    // LRAgent: adapters with bit-identical v_proj lora_A share one LR cache under lragent-baselr.
                    {"shared_a_group", m.shared_a_group.empty() ? nlohmann::json(nullptr) : nlohmann::json(m.shared_a_group)},
                    {"shared_a_with", m.shared_a_with}});
  }
  return {{"object", "list"}, {"data", std::move(data)}};
}

ApiResult<LoadAdapterRequest> parse_load_adapter_request(std::string_view body, const RequestLimits& limits) {
  ApiResult<json> doc = parse_json_object(body, limits);
  if (!doc.ok()) return doc.error();
  const json& obj = doc.value();
  LoadAdapterRequest r;
  if (auto e = read_required(obj, "lora_name", kLoadMissing, r.name)) return *e;
  if (auto e = read_required(obj, "lora_path", kLoadMissing, r.path)) return *e;
  auto it = obj.find("kind");
  if (it != obj.end() && !it->is_null()) {
    if (!it->is_string()) return bad_request("kind", "kind must be a string");
    r.kind = it->get<std::string>();
    if (!is_adapter_kind(r.kind)) {
      return bad_request("kind", "unknown kind '" + r.kind + "'; expected lora, alora or icarus");
    }
  }
  return r;
}

ApiResult<UnloadAdapterRequest> parse_unload_adapter_request(std::string_view body, const RequestLimits& limits) {
  ApiResult<json> doc = parse_json_object(body, limits);
  if (!doc.ok()) return doc.error();
  UnloadAdapterRequest r;
  if (auto e = read_required(doc.value(), "lora_name", "'lora_name' must be provided.", r.name)) return *e;
  return r;
}

ApiResult<std::string> load_adapter(ServingEngine& engine, const std::string& base_name,
                                    const std::string& lora_dir, std::string_view body,
                                    const RequestLimits& limits, std::string* log_detail) {
  ApiResult<LoadAdapterRequest> parsed = parse_load_adapter_request(body, limits);
  if (!parsed.ok()) return parsed.error();
  const LoadAdapterRequest& r = parsed.value();
  if (r.name == base_name) {
    return bad_request("lora_name", "'" + r.name + "' is the base model's name; pick another lora_name");
  }
  for (const ServedModel& m : engine.models()) {
    if (!m.name.empty() && m.name == r.name) {
      return bad_request("lora_name", "The lora adapter '" + r.name + "' has already been loaded.");
    }
  }
  ApiResult<std::string> path = confine_adapter_path(lora_dir, r.path);
  if (!path.ok()) return path.error();
  if (Status st = engine.load_adapter(r.name, path.value(), r.kind); !st.is_ok()) {
    if (log_detail)
      *log_detail = "load_lora_adapter '" + r.name + "' from " + path.value() + ": " + st.message();
    return load_error(st, r);
  }
  return "Success: LoRA adapter '" + r.name + "' added successfully.";
}

ApiResult<std::string> unload_adapter(ServingEngine& engine, std::string_view body, const RequestLimits& limits) {
  ApiResult<UnloadAdapterRequest> parsed = parse_unload_adapter_request(body, limits);
  if (!parsed.ok()) return parsed.error();
  const std::string& name = parsed.value().name;
  if (Status st = engine.unload_adapter(name); !st.is_ok()) {
    if (st.code() == ErrorCode::kNotFound) return adapter_not_found(name);
    return api_error_from_status(st);
  }
  return "Success: LoRA adapter '" + name + "' removed successfully.";
}

}  // namespace agentkv::server
