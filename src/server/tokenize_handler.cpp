#include "server/tokenize_handler.h"

#include <cstdint>
#include <vector>

#include "server/models_handler.h"
#include "server/token_ids.h"
#include "tokenizer/tokenizer.h"

namespace agentkv::server {
namespace {

using json = nlohmann::json;

// `model`, when given, must name what the server serves (404 otherwise), as
// on the completion endpoints; every model shares the base's tokenizer.
std::optional<ApiError> check_model(const ServingEngine& engine, const std::string& base_name,
                                    const json& obj) {
  auto it = obj.find("model");
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) return bad_request("model", "model must be a string");
  ApiResult<std::string> r = resolve_model(engine, base_name, it->get<std::string>());
  if (!r.ok()) return r.error();
  return std::nullopt;
}

}  // namespace

ApiResult<json> tokenize_request(const ServingEngine& engine, const std::string& base_name,
                                 std::string_view body, const RequestLimits& limits) {
  ApiResult<json> doc = parse_json_object(body, limits);
  if (!doc.ok()) return doc.error();
  const json& obj = doc.value();
  if (auto e = check_model(engine, base_name, obj)) return *e;
  auto p = obj.find("prompt");
  if (p == obj.end() || p->is_null()) return bad_request("prompt", "prompt is required");
  if (!p->is_string()) return bad_request("prompt", "prompt must be a string");
  bool add_special = true;
  if (auto a = obj.find("add_special_tokens"); a != obj.end() && !a->is_null()) {
    if (!a->is_boolean()) return bad_request("add_special_tokens", "add_special_tokens must be a boolean");
    add_special = a->get<bool>();
  }
  const std::vector<int32_t> ids =
      engine.tokenizer().encode(p->get_ref<const std::string&>(), add_special, /*parse_special=*/true);
  return json{{"count", ids.size()}, {"max_model_len", engine.max_model_len()}, {"tokens", ids}};
}

ApiResult<json> detokenize_request(const ServingEngine& engine, const std::string& base_name,
                                   std::string_view body, const RequestLimits& limits) {
  ApiResult<json> doc = parse_json_object(body, limits);
  if (!doc.ok()) return doc.error();
  const json& obj = doc.value();
  if (auto e = check_model(engine, base_name, obj)) return *e;
  auto t = obj.find("tokens");
  if (t == obj.end() || t->is_null()) return bad_request("tokens", "tokens is required");
  ApiResult<std::vector<int32_t>> ids = read_token_ids(*t, "tokens", engine.vocab_size(), limits);
  if (!ids.ok()) return ids.error();
  return json{{"prompt", engine.tokenizer().decode(ids.value())}};
}

}  // namespace agentkv::server
