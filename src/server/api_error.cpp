#include "server/api_error.h"

namespace agentkv::server {

ApiError bad_request(std::string param, std::string message) {
  ApiError e;
  e.status = 400;
  e.param = std::move(param);
  e.message = std::move(message);
  return e;
}

ApiError model_not_found(const std::string& model, const std::vector<std::string>& available) {
  ApiError e;
  e.status = 404;
  e.param = "model";
  e.code = "model_not_found";
  e.message = "The model '" + model + "' does not exist";
  for (std::size_t i = 0; i < available.size(); ++i) {
    e.message += (i == 0 ? "; this server serves: '" : ", '") + available[i] + "'";
  }
  return e;
}

ApiError api_error_from_status(const Status& st) {
  ApiError e;
  e.message = st.message();
  switch (st.code()) {
    case ErrorCode::kInvalidArgument:
      e.status = 400;
      break;
    case ErrorCode::kNotFound:
      // The one thing a request names that can vanish: an adapter (unloaded
      // between routing and submit).
      e.status = 404;
      e.param = "model";
      e.code = "model_not_found";
      break;
    case ErrorCode::kOutOfRange:
      e.status = 400;
      e.param = "messages";
      e.code = "context_length_exceeded";
      break;
    case ErrorCode::kResourceExhausted:
      e.status = 429;
      e.type = "rate_limit_error";
      e.code = "server_busy";
      break;
    case ErrorCode::kUnavailable:
      e.status = 503;
      e.type = "server_error";
      e.code = "unavailable";
      break;
    default:
      e.status = 500;
      e.type = "server_error";
      break;
  }
  return e;
}

nlohmann::json to_json(const ApiError& e) {
  nlohmann::json err = {{"message", e.message}, {"type", e.type}};
  err["param"] = e.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.param);
  err["code"] = e.code.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.code);
  return {{"error", std::move(err)}};
}

}  // namespace agentkv::server
