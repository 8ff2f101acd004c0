// The models a server answers for: the base (under its served name) and the
// adapters the engine has registered, which can change at run time.
//
//   GET  /v1/models                 the base first, then every adapter
//   POST /v1/load_lora_adapter      {"lora_name", "lora_path", "kind"?}
//   POST /v1/unload_lora_adapter    {"lora_name"}
//
// and the routing of a request's `model` to ServeRequest::adapter. The load
// and unload endpoints follow vLLM's (status codes, the plain-text success
// body), with every error in OpenAI's JSON. Pure functions of the engine and
// the body, so the HTTP layer only writes what they return.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "agentkv/serving.h"
#include "server/api_error.h"
#include "server/openai_request.h"

namespace agentkv::server {

bool is_adapter_kind(std::string_view s);       // lora, alora, icarus
bool is_kv_sharing_scheme(std::string_view s);  // a name of the scheme registry (sharing/scheme.h)
// Why s is not one ("" when it is): unknown, or a pair that does not compose.
std::string kv_sharing_error(std::string_view s);

// Every name a request's `model` may take: base_name first, then the adapters.
std::vector<std::string> served_model_names(const ServingEngine& engine, const std::string& base_name);

// A request's `model` (empty: absent) as ServeRequest::adapter: "" for the
// base, the adapter's name for an adapter; else 404 model_not_found listing
// what is served.
ApiResult<std::string> resolve_model(const ServingEngine& engine, const std::string& base_name,
                                     const std::string& model);

// The body of GET /v1/models. Without an engine (still loading): the base only.
nlohmann::json models_list(const std::string& base_name, const ServingEngine* engine, int64_t created);

struct LoadAdapterRequest {
  std::string name;  // lora_name, non-empty
  std::string path;  // lora_path, non-empty
  std::string kind;  // "" (from the file), lora, alora or icarus
};
struct UnloadAdapterRequest {
  std::string name;  // lora_name, non-empty
};
ApiResult<LoadAdapterRequest> parse_load_adapter_request(std::string_view body, const RequestLimits& limits);
ApiResult<UnloadAdapterRequest> parse_unload_adapter_request(std::string_view body, const RequestLimits& limits);

// POST /v1/load_lora_adapter and /v1/unload_lora_adapter: vLLM's success text
// ("Success: LoRA adapter 'NAME' added successfully.") or the error. A name
// equal to base_name is refused. lora_path is confined to `lora_dir` (see
// adapter_path.h). An error of the engine's loader reaches the client as a
// generic message, never the loader's (which may quote bytes of the file,
// "bad magic 0x746f6f72" for /etc/passwd); `log_detail` gets it, for the
// server's log.
ApiResult<std::string> load_adapter(ServingEngine& engine, const std::string& base_name,
                                    const std::string& lora_dir, std::string_view body,
                                    const RequestLimits& limits, std::string* log_detail);
ApiResult<std::string> unload_adapter(ServingEngine& engine, std::string_view body, const RequestLimits& limits);

}  // namespace agentkv::server
