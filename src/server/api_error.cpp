#include "server/api_error.h"

namespace agentkv::server {

ApiError bad_request(std::string param, std::string message) {
  ApiError e;
  e.status = 400;
  e.param = std::move(param);
  e.message = std::move(message);
  return e;
}

ApiError model_not_found(const std::string& model) {
  ApiError e;
  e.status = 404;
  e.param = "model";
  e.code = "model_not_found";
  e.message = "The model '" + model + "' does not exist";
  return e;
}

nlohmann::json to_json(const ApiError& e) {
  nlohmann::json err = {{"message", e.message}, {"type", e.type}};
  err["param"] = e.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.param);
  err["code"] = e.code.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.code);
  return {{"error", std::move(err)}};
}

}  // namespace agentkv::server
