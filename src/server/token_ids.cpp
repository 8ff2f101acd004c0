#include "server/token_ids.h"

#include <string>

namespace agentkv::server {

ApiResult<std::vector<int32_t>> read_token_ids(const nlohmann::json& v, const char* param, int64_t vocab,
                                               const RequestLimits& limits) {
  if (!v.is_array()) return bad_request(param, std::string(param) + " must be an array of token ids");
  if (v.size() > limits.max_prompt_tokens) {
    return bad_request(param, "at most " + std::to_string(limits.max_prompt_tokens) + " tokens are allowed");
  }
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const nlohmann::json& x : v) {
    if (!x.is_number_integer()) return bad_request(param, std::string(param) + " must be an array of token ids");
    const int64_t id = x.is_number_unsigned() && x.get<uint64_t>() > uint64_t(INT64_MAX) ? -1 : x.get<int64_t>();
    if (id < 0 || id >= vocab) {
      return bad_request(param, "token id " + x.dump() + " is outside the vocabulary (" + std::to_string(vocab) +
                                    " tokens)");
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

}  // namespace agentkv::server
