#include "server/openai_guided.h"

#include <algorithm>

#include "server/json_field.h"

namespace agentkv::server {
namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

// The body again, keeping key order: a schema's properties are generated in
// the order it lists them. Parsed only when a schema is there.
struct Ordered {
  std::string_view body;
  std::optional<ordered_json> doc;
  const ordered_json& get() {
    if (!doc) doc = ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
    return *doc;
  }
};

bool valid_tool_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
  });
}

// An EBNF string literal: xgrammar's escapes are JSON's.
std::string ebnf_literal(const std::string& s) { return json(s).dump(); }

// Sets out.grammar once; a second source is a 400 naming it.
MaybeError set_grammar(GuidedFields& out, const char* param, GrammarKind kind, std::string text) {
  if (out.grammar) {
    return bad_request(param, std::string(param) + " cannot be combined with " + out.grammar_field +
                                  "; give one output constraint");
  }
  out.grammar = GrammarSpec{kind, std::move(text)};
  out.grammar_field = param;
  return std::nullopt;
}

MaybeError read_response_format(const json& obj, Ordered& ordered, GuidedFields& out) {
  const json* rf = field(obj, "response_format");
  if (!rf) return std::nullopt;
  if (!rf->is_object()) return wrong_type("response_format", "an object", *rf);
  const json* type = field(*rf, "type");
  if (!type || !type->is_string()) return bad_request("response_format.type", "response_format.type is required");
  const std::string t = type->get<std::string>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") return set_grammar(out, "response_format", GrammarKind::kJsonObject, "");
  if (t != "json_schema") {
    return bad_request("response_format.type",
                       "unknown response_format.type '" + t + "'; expected text, json_object or json_schema");
  }
  const json* js = field(*rf, "json_schema");
  if (!js || !js->is_object()) return bad_request("response_format.json_schema", "response_format.json_schema (an object) is required");
  const json* name = field(*js, "name");
  if (name && !name->is_string()) return wrong_type("response_format.json_schema.name", "a string", *name);
  const json* strict = field(*js, "strict");
  // strict or not, the schema is enforced in full (xgrammar's strict mode:
  // no properties beyond those the schema names unless it allows them).
  if (strict && !strict->is_boolean()) return wrong_type("response_format.json_schema.strict", "a boolean", *strict);
  const json* schema = field(*js, "schema");
  if (!schema) return set_grammar(out, "response_format", GrammarKind::kJsonObject, "");
  if (!schema->is_object() && !schema->is_boolean()) return wrong_type("response_format.json_schema.schema", "an object", *schema);
  return set_grammar(out, "response_format", GrammarKind::kJsonSchema,
                     ordered.get()["response_format"]["json_schema"]["schema"].dump());
}

MaybeError read_vllm_guided(const json& obj, Ordered& ordered, GuidedFields& out) {
  if (const json* v = field(obj, "guided_json")) {
    if (v->is_string()) {
      AKV_API_TRY(set_grammar(out, "guided_json", GrammarKind::kJsonSchema, v->get<std::string>()));
    } else if (v->is_object()) {
      AKV_API_TRY(set_grammar(out, "guided_json", GrammarKind::kJsonSchema, ordered.get()["guided_json"].dump()));
    } else {
      return wrong_type("guided_json", "an object or a string", *v);
    }
  }
  if (const json* v = field(obj, "guided_regex")) {
    if (!v->is_string()) return wrong_type("guided_regex", "a string", *v);
    AKV_API_TRY(set_grammar(out, "guided_regex", GrammarKind::kRegex, v->get<std::string>()));
  }
  if (const json* v = field(obj, "guided_choice")) {
    if (!v->is_array() || v->empty()) return wrong_type("guided_choice", "a non-empty array of strings", *v);
    if (v->size() > static_cast<size_t>(kMaxGuidedChoices)) {
      return bad_request("guided_choice", "at most " + std::to_string(kMaxGuidedChoices) + " choices");
    }
    std::string rule = "root ::= ";
    for (size_t i = 0; i < v->size(); ++i) {
      const json& c = (*v)[i];
      if (!c.is_string() || c.get<std::string>().empty()) {
        return wrong_type("guided_choice[" + std::to_string(i) + "]", "a non-empty string", c);
      }
      rule += (i ? " | " : "") + ebnf_literal(c.get<std::string>());
    }
    AKV_API_TRY(set_grammar(out, "guided_choice", GrammarKind::kEbnf, rule));
  }
  if (const json* v = field(obj, "guided_grammar")) {
    if (!v->is_string()) return wrong_type("guided_grammar", "a string (EBNF/GBNF with a root rule)", *v);
    AKV_API_TRY(set_grammar(out, "guided_grammar", GrammarKind::kEbnf, v->get<std::string>()));
  }
  // Fields of vLLM's guided decoding that we do not honour: a 400, not a no-op.
  for (const char* key : {"guided_whitespace_pattern", "structural_tag"}) {
    if (field(obj, key)) return bad_request(key, std::string(key) + " is not supported");
  }
  if (const json* v = field(obj, "guided_decoding_backend")) {
    if (!v->is_string() || (v->get<std::string>() != "xgrammar" && v->get<std::string>() != "auto")) {
      return bad_request("guided_decoding_backend", "guided_decoding_backend must be xgrammar (the only one served)");
    }
  }
  return std::nullopt;
}

MaybeError read_tools(const json& obj, Ordered& ordered, GuidedFields& out) {
  const json* tools = field(obj, "tools");
  if (!tools) return std::nullopt;
  if (!tools->is_array()) return wrong_type("tools", "an array", *tools);
  if (tools->size() > static_cast<size_t>(kMaxTools)) {
    return bad_request("tools", "at most " + std::to_string(kMaxTools) + " tools");
  }
  for (size_t i = 0; i < tools->size(); ++i) {
    const std::string p = "tools[" + std::to_string(i) + "]";
    const json& t = (*tools)[i];
    if (!t.is_object()) return wrong_type(p, "an object", t);
    const json* type = field(t, "type");
    if (!type || *type != "function") return bad_request(p + ".type", p + ".type must be \"function\"");
    const json* fn = field(t, "function");
    if (!fn || !fn->is_object()) return bad_request(p + ".function", p + ".function (an object) is required");
    ToolDef d;
    const json* name = field(*fn, "name");
    if (!name || !name->is_string() || !valid_tool_name(name->get<std::string>())) {
      return bad_request(p + ".function.name", p + ".function.name must be 1-64 of [A-Za-z0-9_.-]");
    }
    d.name = name->get<std::string>();
    for (const ToolDef& other : out.tools) {
      if (other.name == d.name) return bad_request(p + ".function.name", "two tools are named '" + d.name + "'");
    }
    if (const json* desc = field(*fn, "description")) {
      if (!desc->is_string()) return wrong_type(p + ".function.description", "a string", *desc);
      d.description = desc->get<std::string>();
    }
    if (const json* params = field(*fn, "parameters")) {
      if (!params->is_object()) return wrong_type(p + ".function.parameters", "an object (a JSON Schema)", *params);
      d.parameters = ordered.get()["tools"][i]["function"]["parameters"];
    }
    if (const json* strict = field(*fn, "strict"); strict && !strict->is_boolean()) {
      return wrong_type(p + ".function.strict", "a boolean", *strict);
    }
    out.tools.push_back(std::move(d));
  }
  return std::nullopt;
}

MaybeError read_tool_choice(const json& obj, GuidedFields& out) {
  out.tool_choice = out.tools.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
  const json* tc = field(obj, "tool_choice");
  if (tc && tc->is_string()) {
    const std::string s = tc->get<std::string>();
    if (s == "none") {
      out.tool_choice = ToolChoice::kNone;
    } else if (s == "auto") {
      out.tool_choice = ToolChoice::kAuto;
    } else if (s == "required") {
      out.tool_choice = ToolChoice::kRequired;
    } else {
      return bad_request("tool_choice", "tool_choice must be none, auto, required or {\"type\": \"function\", ...}");
    }
  } else if (tc && tc->is_object()) {
    const json* fn = field(*tc, "function");
    const json* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
    if (!name || !name->is_string()) return bad_request("tool_choice.function.name", "tool_choice.function.name is required");
    out.tool_choice = ToolChoice::kNamed;
    out.tool_name = name->get<std::string>();
  } else if (tc) {
    return wrong_type("tool_choice", "a string or an object", *tc);
  }
  if (out.tool_choice != ToolChoice::kNone && out.tools.empty() && tc) {
    return bad_request("tool_choice", "tool_choice " + (tc->is_string() ? tc->get<std::string>() : std::string("function")) +
                                          " needs tools");
  }
  if (out.tool_choice == ToolChoice::kNamed &&
      std::none_of(out.tools.begin(), out.tools.end(), [&](const ToolDef& t) { return t.name == out.tool_name; })) {
    return bad_request("tool_choice.function.name", "tool_choice names '" + out.tool_name + "', which is not in tools");
  }
  if (const json* v = field(obj, "parallel_tool_calls")) {
    if (!v->is_boolean()) return wrong_type("parallel_tool_calls", "a boolean", *v);
    out.parallel_tool_calls = v->get<bool>();
  }
  if (out.grammar && (out.tool_choice == ToolChoice::kRequired || out.tool_choice == ToolChoice::kNamed ||
                      out.tool_choice == ToolChoice::kAuto)) {
    return bad_request(out.grammar_field, out.grammar_field + " cannot be combined with tools (tool_choice " +
                                              std::string(out.tool_choice == ToolChoice::kAuto ? "auto" : "required or named") +
                                              "); set tool_choice none or drop it");
  }
  return std::nullopt;
}

}  // namespace

MaybeError read_guided(const json& obj, std::string_view body, bool chat, GuidedFields& out) {
  Ordered ordered{body, std::nullopt};
  AKV_API_TRY(read_response_format(obj, ordered, out));
  AKV_API_TRY(read_vllm_guided(obj, ordered, out));
  if (!chat) {
    for (const char* key : {"tools", "tool_choice", "parallel_tool_calls"}) {
      if (field(obj, key)) return bad_request(key, std::string(key) + " is only served on /v1/chat/completions");
    }
    return std::nullopt;
  }
  AKV_API_TRY(read_tools(obj, ordered, out));
  return read_tool_choice(obj, out);
}

MaybeError read_tool_calls(const json& v, const std::string& param, std::vector<ToolCall>& out) {
  if (!v.is_array()) return wrong_type(param, "an array", v);
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string p = param + "[" + std::to_string(i) + "]";
    const json& c = v[i];
    if (!c.is_object()) return wrong_type(p, "an object", c);
    ToolCall call;
    if (const json* id = field(c, "id")) {
      if (!id->is_string()) return wrong_type(p + ".id", "a string", *id);
      call.id = id->get<std::string>();
    }
    const json* fn = field(c, "function");
    if (!fn || !fn->is_object()) return bad_request(p + ".function", p + ".function (an object) is required");
    const json* name = field(*fn, "name");
    if (!name || !name->is_string()) return bad_request(p + ".function.name", p + ".function.name is required");
    call.name = name->get<std::string>();
    if (const json* args = field(*fn, "arguments")) {
      if (!args->is_string()) return wrong_type(p + ".function.arguments", "a string (JSON text)", *args);
      call.arguments = args->get<std::string>();
    }
    out.push_back(std::move(call));
  }
  return std::nullopt;
}

}  // namespace agentkv::server
