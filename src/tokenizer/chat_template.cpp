#include "tokenizer/chat_template.h"

namespace agentkv {

namespace {

// SmolLM2-Instruct's template inserts this system turn when the conversation
// does not start with one.
constexpr std::string_view kSmolSystem =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

// Jinja's `trim` filter (Python str.strip(): all Unicode whitespace; ASCII
// whitespace covers every message we produce or receive in practice).
std::string_view trim(std::string_view s) {
  constexpr std::string_view kWs = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(kWs);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kWs) - b + 1);
}

std::string apply_chatml(std::span<const ChatMessage> msgs, bool gen) {
  std::string out;
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (i == 0 && msgs[0].role != "system") {
      out += "<|im_start|>system\n";
      out += kSmolSystem;
      out += "<|im_end|>\n";
    }
    out += "<|im_start|>" + msgs[i].role + "\n" + msgs[i].content + "<|im_end|>\n";
  }
  if (gen) out += "<|im_start|>assistant\n";
  return out;
}

std::string apply_llama3(std::span<const ChatMessage> msgs, bool gen) {
  std::string out;
  for (const auto& m : msgs) {
    out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
    out += trim(m.content);
    out += "<|eot_id|>";
  }
  if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// Mistral v1 has no system role; like llama.cpp, a system message is folded
// into the next user turn, separated by a blank line. The v3 tokenizer's tool
// blocks come as their own roles: "available_tools" and "tool" (a result).
std::string apply_mistral(std::span<const ChatMessage> msgs,
                          bool /*gen: the [/INST] already is the prompt*/) {
  std::string out, system;
  for (const auto& m : msgs) {
    if (m.role == "system") {
      system += m.content;
    } else if (m.role == "user") {
      out += "[INST] ";
      if (!system.empty()) {
        out += system + "\n\n";
        system.clear();
      }
      out += m.content + " [/INST]";
    } else if (m.role == "available_tools") {
      out += "[AVAILABLE_TOOLS] " + m.content + "[/AVAILABLE_TOOLS]";
    } else if (m.role == "tool") {
      out += "[TOOL_RESULTS] " + m.content + "[/TOOL_RESULTS]";
    } else {
      out += m.content + "</s>";
    }
  }
  return out;
}

}  // namespace

Result<ChatTemplateKind> chat_template_detect(std::string_view jinja) {
  const auto has = [&](std::string_view s) { return jinja.find(s) != std::string_view::npos; };
  if (has("<|start_header_id|>") && has("<|eot_id|>")) return ChatTemplateKind::kLlama3;
  if (has("<|im_start|>")) return ChatTemplateKind::kChatml;
  if (has("[INST]") && has("[/INST]")) return ChatTemplateKind::kMistral;
  return make_error(ErrorCode::kUnsupported,
                    "unrecognised chat template; pass --chat-template chatml|llama3|mistral");
}

Result<ChatTemplateKind> chat_template_from_name(std::string_view name) {
  if (name == "chatml") return ChatTemplateKind::kChatml;
  if (name == "llama3") return ChatTemplateKind::kLlama3;
  if (name == "mistral") return ChatTemplateKind::kMistral;
  return make_error(ErrorCode::kInvalidArgument, "unknown chat template '", name,
                    "'; expected chatml, llama3 or mistral");
}

const char* chat_template_name(ChatTemplateKind kind) {
  switch (kind) {
    case ChatTemplateKind::kChatml:
      return "chatml";
    case ChatTemplateKind::kLlama3:
      return "llama3";
    case ChatTemplateKind::kMistral:
      return "mistral";
  }
  return "?";
}

std::string chat_template_apply(ChatTemplateKind kind, std::span<const ChatMessage> msgs,
                                bool add_generation_prompt) {
  switch (kind) {
    case ChatTemplateKind::kChatml:
      return apply_chatml(msgs, add_generation_prompt);
    case ChatTemplateKind::kLlama3:
      return apply_llama3(msgs, add_generation_prompt);
    case ChatTemplateKind::kMistral:
      return apply_mistral(msgs, add_generation_prompt);
  }
  return {};
}

}  // namespace agentkv
