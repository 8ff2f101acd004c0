// A body's array of token ids ("tokens" of /detokenize and /v1/segments):
// an array of integers in [0, vocab), at most limits.max_prompt_tokens long.
// Errors are 400s naming `param`.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "server/api_error.h"
#include "server/openai_request.h"

namespace agentkv::server {

ApiResult<std::vector<int32_t>> read_token_ids(const nlohmann::json& v, const char* param, int64_t vocab,
                                               const RequestLimits& limits);

}  // namespace agentkv::server
