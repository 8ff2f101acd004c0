// Reading an OpenAI request's JSON fields, shared by the request parsers:
// null counts as absent (OpenAI's clients send explicit nulls), and a field
// of the wrong type is a 400 that names it and what came.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace agentkv::server {

inline const nlohmann::json* field(const nlohmann::json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

inline std::string type_name(const nlohmann::json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number_float()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

inline ApiError wrong_type(const std::string& param, const char* expected, const nlohmann::json& got) {
  return bad_request(param, param + " must be " + expected + ", got " + type_name(got));
}

}  // namespace agentkv::server
