#include "server/tool_format.h"

namespace agentkv::server {

ToolFormat tool_format_detect(std::string_view jinja, ChatTemplateKind kind) {
  const auto has = [&](std::string_view s) { return jinja.find(s) != std::string_view::npos; };
  switch (kind) {
    case ChatTemplateKind::kLlama3:
      // 3.1+ templates render tool results as "ipython" turns; 3.0 has no tools.
      if (has("ipython")) return ToolFormat::kLlama3;
      break;
    case ChatTemplateKind::kMistral:
      if (has("[TOOL_CALLS]")) return ToolFormat::kMistral;
      break;
    case ChatTemplateKind::kChatml:
    case ChatTemplateKind::kGemma:
      break;  // Qwen2.5's <tool_call> is Hermes, and so is the generic format
  }
  return ToolFormat::kHermes;
}

bool tool_format_taught_by(std::string_view jinja, ToolFormat f) {
  switch (f) {
    case ToolFormat::kLlama3:
      return jinja.find("ipython") != std::string_view::npos;
    case ToolFormat::kMistral:
      return jinja.find("[TOOL_CALLS]") != std::string_view::npos;
    case ToolFormat::kHermes:
      break;
  }
  return jinja.find("<tool_call>") != std::string_view::npos;
}

Result<ToolFormat> tool_format_from_name(std::string_view name) {
  if (name == "hermes") return ToolFormat::kHermes;
  if (name == "llama3") return ToolFormat::kLlama3;
  if (name == "mistral") return ToolFormat::kMistral;
  return make_error(ErrorCode::kInvalidArgument, "unknown tool format '", name,
                    "'; expected hermes, llama3 or mistral");
}

const char* tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::kHermes:
      return "hermes";
    case ToolFormat::kLlama3:
      return "llama3";
    case ToolFormat::kMistral:
      return "mistral";
  }
  return "?";
}

const ToolSyntax& tool_syntax(ToolFormat f) {
  static const ToolSyntax kHermes{{"<tool_call>"}, "", "", "arguments", "</tool_call>", "", ""};
  // <|python_tag|> opens built-in tool calls; a JSON call may follow it too.
  static const ToolSyntax kLlama3{{"<|python_tag|>"}, "{\"name\": ", "", "parameters", "", "; ", ""};
  static const ToolSyntax kMistral{{"[TOOL_CALLS]"}, "", "[", "arguments", "", ", ", "]"};
  switch (f) {
    case ToolFormat::kLlama3:
      return kLlama3;
    case ToolFormat::kMistral:
      return kMistral;
    case ToolFormat::kHermes:
      break;
  }
  return kHermes;
}

}  // namespace agentkv::server
