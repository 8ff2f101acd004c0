// The error every OpenAI-compatible endpoint answers with: an HTTP status and
// OpenAI's body {"error":{"message","type","param","code"}}. Request parsing
// returns it as a value; the HTTP layer only serialises it.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/status.h"

namespace agentkv::server {

struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;  // the offending field; empty -> JSON null
  std::string code;   // e.g. "model_not_found"; empty -> JSON null
};

// A parse step: nothing, or the error to answer with.
using MaybeError = std::optional<ApiError>;

#define AKV_API_TRY(expr)             \
  do {                                \
    if (auto _e = (expr)) return *_e; \
  } while (0)

// 400 invalid_request_error naming `param`.
ApiError bad_request(std::string param, std::string message);

// 404 invalid_request_error, code "model_not_found", as OpenAI answers a
// request naming a model the server does not serve. `available` (the base
// and the adapters being served) is listed in the message when given.
ApiError model_not_found(const std::string& model, const std::vector<std::string>& available = {});

// The HTTP answer to an error Status from the engine: kInvalidArgument 400,
// kNotFound 404 model_not_found, kOutOfRange 400 context_length_exceeded,
// kResourceExhausted 429, kUnavailable 503, anything else 500.
ApiError api_error_from_status(const Status& st);

// {"error":{"message":..,"type":..,"param":..|null,"code":..|null}}
nlohmann::json to_json(const ApiError& e);

// Either a parsed value or the error to answer with.
template <class T>
class ApiResult {
 public:
  ApiResult(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design
  ApiResult(ApiError error) : error_(std::move(error)) {}   // NOLINT
  bool ok() const { return value_.has_value(); }
  const T& value() const& { return *value_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  const ApiError& error() const { return error_; }

 private:
  std::optional<T> value_;
  ApiError error_;
};

}  // namespace agentkv::server
