#include "grammar/schema_check.h"

#include <nlohmann/json.hpp>

#include <array>
#include <string>

namespace agentkv {
namespace {

using json = nlohmann::json;

// Keywords xgrammar 0.2.8 parses but does not enforce (json_schema_converter.cc:
// WarnUnsupportedKeywords, and the multipleOf / oneOf fallbacks).
constexpr std::array<const char*, 12> kIgnored = {"not",        "if",          "then",        "else",
                                                  "dependencies", "dependentRequired", "dependentSchemas",
                                                  "uniqueItems", "contains",    "minContains", "maxContains",
                                                  "multipleOf"};

// Keys whose value is a map from names to schemas: the names are not keywords.
bool is_schema_map(const std::string& key) {
  return key == "properties" || key == "patternProperties" || key == "definitions" || key == "$defs";
}

Status refuse(const std::string& where, const std::string& what) {
  return make_error(ErrorCode::kInvalidArgument, "the schema uses ", what, " at ", where.empty() ? "/" : where,
                    ", which is not enforced here; remove it or use guided_grammar");
}

Status walk(const json& s, const std::string& where) {
  if (s.is_array()) {
    for (size_t i = 0; i < s.size(); ++i) AKV_RETURN_IF_ERROR(walk(s[i], where + "/" + std::to_string(i)));
    return Status::ok();
  }
  if (!s.is_object()) return Status::ok();
  for (const char* k : kIgnored) {
    // uniqueItems: false and multipleOf 1 on an integer constrain nothing.
    auto it = s.find(k);
    if (it == s.end()) continue;
    if (std::string(k) == "uniqueItems" && it->is_boolean() && !it->get<bool>()) continue;
    if (std::string(k) == "multipleOf" && it->is_number_integer() && s.value("type", json()) == "integer") continue;
    return refuse(where, std::string("\"") + k + "\"");
  }
  // Counts the converter unrolls into grammar rules: a client must not buy
  // seconds of compilation with one number (maxLength 10^6 took 2.6 s).
  for (const char* k : {"minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties"}) {
    auto it = s.find(k);
    if (it != s.end() && it->is_number() && it->get<double>() > kMaxSchemaCount) {
      return make_error(ErrorCode::kInvalidArgument, "the schema's \"", k, "\" at ", where.empty() ? "/" : where,
                        " is over ", kMaxSchemaCount, ", the most served here");
    }
  }
  for (const char* k : {"oneOf", "allOf"}) {
    auto it = s.find(k);
    if (it != s.end() && it->is_array() && it->size() > 1) {
      return refuse(where, std::string("\"") + k + "\" with several schemas (use anyOf)");
    }
  }
  // JSON Schema matches patternProperties anywhere in a key, xgrammar whole
  // keys: another key it generates could still match one. Safe only when no
  // other key may appear.
  if (s.contains("patternProperties") && s.value("additionalProperties", json(true)) != json(false)) {
    return refuse(where, "\"patternProperties\" without \"additionalProperties\": false");
  }
  // Draft-4 tuples: xgrammar reads prefixItems, not an array of items.
  if (auto it = s.find("items"); it != s.end() && it->is_array()) return refuse(where, "\"items\" as an array (use prefixItems)");
  if (s.contains("additionalItems")) return refuse(where, "\"additionalItems\" (use prefixItems and items)");
  // anyOf / oneOf / allOf replace the schema they sit in: keywords beside
  // them (a "type", "properties") would be dropped.
  for (const char* k : {"anyOf", "oneOf", "allOf"}) {
    if (!s.contains(k)) continue;
    for (const auto& [key, value] : s.items()) {
      (void)value;
      if (key == k || key == "description" || key == "title" || key == "default" || key == "examples" ||
          key == "$schema" || key == "$id" || key == "id" || key == "definitions" || key == "$defs") {
        continue;
      }
      return refuse(where, std::string("\"") + key + "\" beside \"" + k + "\"");
    }
  }
  if (auto r = s.find("$ref"); r != s.end() && r->is_string() && r->get<std::string>().rfind('#', 0) != 0) {
    return refuse(where, "a remote \"$ref\"");
  }
  if ((s.contains("pattern") || s.contains("format")) && (s.contains("minLength") || s.contains("maxLength"))) {
    return refuse(where, "minLength/maxLength beside a pattern or format");
  }
  for (const auto& [key, value] : s.items()) {
    const std::string child = where + "/" + key;
    if (is_schema_map(key) && value.is_object()) {
      for (const auto& [name, sub] : value.items()) AKV_RETURN_IF_ERROR(walk(sub, child + "/" + name));
    } else if (key != "enum" && key != "const" && key != "default" && key != "examples") {
      AKV_RETURN_IF_ERROR(walk(value, child));
    }
  }
  return Status::ok();
}

}  // namespace

Status json_nesting_within(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) {
        return make_error(ErrorCode::kInvalidArgument, "the schema nests deeper than ", max_depth, " levels");
      }
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return Status::ok();
}

Status json_schema_check_supported(std::string_view schema) {
  AKV_RETURN_IF_ERROR(json_nesting_within(schema, kMaxSchemaDepth));
  const json s = json::parse(schema, nullptr, /*allow_exceptions=*/false);
  if (s.is_discarded()) return make_error(ErrorCode::kInvalidArgument, "the schema is not valid JSON");
  if (!s.is_object() && !s.is_boolean()) return make_error(ErrorCode::kInvalidArgument, "a schema is an object");
  return walk(s, "");
}

}  // namespace agentkv
