// Parsing of the request fields that constrain the output: OpenAI's
// response_format, tools, tool_choice and parallel_tool_calls, vLLM's
// guided_json / guided_regex / guided_choice / guided_grammar, and the
// assistant tool_calls of a chat history. Pure functions of the JSON body:
// unit-tested and fuzzed here; compilation happens in src/grammar/.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/grammar_spec.h"
#include "server/api_error.h"

namespace agentkv::server {

inline constexpr int kMaxTools = 128;
inline constexpr int kMaxGuidedChoices = 256;

struct ToolDef {
  std::string name;         // [A-Za-z0-9_-.]{1,64}, as OpenAI
  std::string description;
  // A JSON Schema (an object), in the client's key order (the model writes
  // properties in the order the schema declares them); {} when absent.
  nlohmann::ordered_json parameters = nlohmann::ordered_json::object();
};

struct ToolCall {
  std::string id;         // "call_..." (assigned by the server for generated calls)
  std::string name;
  std::string arguments;  // a JSON text, as OpenAI's function.arguments
};

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct GuidedFields {
  // A grammar from response_format or guided_*; `grammar_field` names the
  // field it came from (for errors).
  std::optional<GrammarSpec> grammar;
  std::string grammar_field;
  std::vector<ToolDef> tools;
  ToolChoice tool_choice = ToolChoice::kNone;  // default: auto with tools, none without
  std::string tool_name;                        // kNamed
  bool parallel_tool_calls = true;
};

// Reads the fields above from a request body (`obj`, parsed from `body`,
// which is parsed again in key order for the schemas). `chat`: tools are read
// (the completions endpoint has none and refuses them with a 400).
MaybeError read_guided(const nlohmann::json& obj, std::string_view body, bool chat, GuidedFields& out);

// An assistant message's "tool_calls" (messages[i].tool_calls): param names the field.
MaybeError read_tool_calls(const nlohmann::json& v, const std::string& param, std::vector<ToolCall>& out);

}  // namespace agentkv::server
