// The frozen segment pool over HTTP (SparseX §4's knowledge-base API; issue
// 11). A tenant (from its API key, as for prompts) manages its own segments:
//
//   POST   /v1/segments       {"text": "..."} | {"tokens": [ids]}, "cache_salt"?
//                            -> {"id", "object": "segment", "tokens", "blocks", ...}
//   GET    /v1/segments       -> {"object": "list", "data": [segment, ...]}
//   DELETE /v1/segments/{id}  -> {"id", "object": "segment", "deleted": true}
//
// A segment is computed exactly (a prefill from position 0 under the
// tenant's namespace and the cache_salt) and its full KV blocks are pinned;
// later prompts of that namespace reuse it at any offset with kv_sharing
// naive, epic or cacheblend, or as a prefix. "text" is tokenized alone, with
// no special tokens added: send "tokens" for an exact match with how it will
// appear inside prompts. Errors are OpenAI's JSON; another tenant's segment
// is a 404 like an unknown one.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "agentkv/serving.h"
#include "server/api_error.h"
#include "server/openai_request.h"

namespace agentkv::server {

ApiResult<nlohmann::json> create_segment_request(ServingEngine& engine, const std::string& tenant,
                                                 std::string_view body, const RequestLimits& limits);
nlohmann::json list_segments_response(ServingEngine& engine, const std::string& tenant);
ApiResult<nlohmann::json> delete_segment_request(ServingEngine& engine, const std::string& tenant,
                                                 const std::string& id);

}  // namespace agentkv::server
