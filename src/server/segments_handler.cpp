#include "server/segments_handler.h"

#include <cstdint>
#include <vector>

#include "server/token_ids.h"
#include "tokenizer/tokenizer.h"

namespace agentkv::server {
namespace {

using json = nlohmann::json;

json segment_json(const SegmentInfo& s) {
  json j = {{"id", s.id},
            {"object", "segment"},
            {"tokens", s.tokens},
            {"blocks", s.blocks},
            {"hits", s.hits},
            {"created", static_cast<int64_t>(s.created)},
            {"last_used", s.last_used},
            {"evicted", s.evicted}};
  j["cache_salt"] = s.cache_salt.empty() ? json(nullptr) : json(s.cache_salt);
  return j;
}

ApiError segment_not_found(const std::string& id) {
  ApiError e;
  e.status = 404;
  e.code = "segment_not_found";
  e.param = "id";
  e.message = "no segment '" + id + "'";
  return e;
}

// Token ids of the body: exactly one of "text" and "tokens".
ApiResult<std::vector<int32_t>> segment_tokens(const ServingEngine& engine, const json& obj,
                                               const RequestLimits& limits) {
  auto text = obj.find("text");
  auto tokens = obj.find("tokens");
  const bool has_text = text != obj.end() && !text->is_null();
  const bool has_tokens = tokens != obj.end() && !tokens->is_null();
  if (has_text == has_tokens) return bad_request("text", "give exactly one of text and tokens");
  if (has_text) {
    if (!text->is_string()) return bad_request("text", "text must be a string");
    if (text->get_ref<const std::string&>().empty()) return bad_request("text", "the segment is empty");
    return engine.tokenizer().encode(text->get_ref<const std::string&>(), /*add_special=*/false,
                                     /*parse_special=*/true);
  }
  if (tokens->is_array() && tokens->empty()) return bad_request("tokens", "the segment is empty");
  return read_token_ids(*tokens, "tokens", engine.vocab_size(), limits);
}

}  // namespace

ApiResult<json> create_segment_request(ServingEngine& engine, const std::string& tenant,
                                       std::string_view body, const RequestLimits& limits) {
  ApiResult<json> doc = parse_json_object(body, limits);
  if (!doc.ok()) return doc.error();
  const json& obj = doc.value();
  ApiResult<std::vector<int32_t>> ids = segment_tokens(engine, obj, limits);
  if (!ids.ok()) return ids.error();
  SegmentSpec spec;
  spec.tokens = std::move(ids).value();
  spec.tenant = tenant;
  if (auto s = obj.find("cache_salt"); s != obj.end() && !s->is_null()) {
    if (!s->is_string()) return bad_request("cache_salt", "cache_salt must be a string");
    if (s->get_ref<const std::string&>().empty())
      return bad_request("cache_salt", "cache_salt must not be empty");
    spec.cache_salt = s->get<std::string>();
  }
  Result<SegmentInfo> r = engine.create_segment(spec);
  if (!r.is_ok()) {
    ApiError e = api_error_from_status(r.status());
    const bool from_tokens = obj.contains("tokens") && !obj["tokens"].is_null();
    if (e.status == 400 || e.status == 404) e.param = from_tokens ? "tokens" : "text";
    if (e.status == 404) {  // nothing the request names can vanish here
      e.status = 400;
      e.code.clear();
    }
    return e;
  }
  return segment_json(*r);
}

json list_segments_response(ServingEngine& engine, const std::string& tenant) {
  json data = json::array();
  for (const SegmentInfo& s : engine.list_segments(tenant)) data.push_back(segment_json(s));
  return json{{"object", "list"}, {"data", std::move(data)}};
}

ApiResult<json> delete_segment_request(ServingEngine& engine, const std::string& tenant,
                                       const std::string& id) {
  const Status st = engine.delete_segment(id, tenant);
  if (st.code() == ErrorCode::kNotFound) return segment_not_found(id);
  if (!st.is_ok()) return api_error_from_status(st);
  return json{{"id", id}, {"object", "segment"}, {"deleted", true}};
}

}  // namespace agentkv::server
