// vLLM's tokenizer endpoints, so an agent can count and cut its context with
// the server's own tokenizer:
//
//   POST /tokenize    {"model"?, "prompt": "text", "add_special_tokens"?: true}
//                     -> {"count", "max_model_len", "tokens": [ids]}
//   POST /detokenize  {"model"?, "tokens": [ids]} -> {"prompt": "text"}
//
// The text is tokenized exactly as a completions prompt is (special-token
// text is the token), which is also what `agentkv tokenize` prints. Pure
// functions of the engine and the body; errors are OpenAI's JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "agentkv/serving.h"
#include "server/api_error.h"
#include "server/openai_request.h"

namespace agentkv::server {

ApiResult<nlohmann::json> tokenize_request(const ServingEngine& engine, const std::string& base_name,
                                           std::string_view body, const RequestLimits& limits);
ApiResult<nlohmann::json> detokenize_request(const ServingEngine& engine, const std::string& base_name,
                                             std::string_view body, const RequestLimits& limits);

}  // namespace agentkv::server
