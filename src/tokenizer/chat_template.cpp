#include "tokenizer/chat_template.h"

namespace agentkv {

namespace {

// Appends the template's own text and the request's (marked as input).
struct Builder {
  MarkedText out;
  void own(std::string_view s) { out.text += s; }
  void input(std::string_view s) {
    if (s.empty()) return;
    const size_t b = out.text.size();
    out.text += s;
    if (!out.input_spans.empty() && out.input_spans.back().end == b) {
      out.input_spans.back().end = out.text.size();
    } else {
      out.input_spans.push_back({b, out.text.size()});
    }
  }
};

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

MarkedText apply_chatml(std::span<const ChatMessage> msgs, bool gen) {
  Builder b;
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (i == 0 && msgs[0].role != "system") {
      b.own("<|im_start|>system\n");
      b.own(kSmolSystem);
      b.own("<|im_end|>\n");
    }
    b.own("<|im_start|>");
    b.input(msgs[i].role);
    b.own("\n");
    b.input(msgs[i].content);
    b.own("<|im_end|>\n");
  }
  if (gen) b.own("<|im_start|>assistant\n");
  return std::move(b.out);
}

MarkedText apply_llama3(std::span<const ChatMessage> msgs, bool gen) {
  Builder b;
  for (const auto& m : msgs) {
    b.own("<|start_header_id|>");
    b.input(m.role);
    b.own("<|end_header_id|>\n\n");
    b.input(trim(m.content));
    b.own("<|eot_id|>");
  }
  if (gen) b.own("<|start_header_id|>assistant<|end_header_id|>\n\n");
  return std::move(b.out);
}

// Mistral v1 has no system role; like llama.cpp, a system message is folded
// into the next user turn, separated by a blank line. The v3 tokenizer's tool
// blocks come as their own roles: "available_tools" and "tool" (a result).
MarkedText apply_mistral(std::span<const ChatMessage> msgs,
                         bool /*gen: the [/INST] already is the prompt*/) {
  Builder b;
  std::string system;
  for (const auto& m : msgs) {
    if (m.role == "system") {
      system += m.content;
    } else if (m.role == "user") {
      b.own("[INST] ");
      if (!system.empty()) {
        b.input(system);
        b.input("\n\n");
        system.clear();
      }
      b.input(m.content);
      b.own(" [/INST]");
    } else if (m.role == "available_tools") {
      b.own("[AVAILABLE_TOOLS] ");
      b.input(m.content);
      b.own("[/AVAILABLE_TOOLS]");
    } else if (m.role == "tool") {
      b.own("[TOOL_RESULTS] ");
      b.input(m.content);
      b.own("[/TOOL_RESULTS]");
    } else {
      b.input(m.content);
      b.own("</s>");
    }
  }
  return std::move(b.out);
}

// Gemma's template (Gemma 3 IT's, without its image and tool parts): a system
// message opens the first user turn followed by a blank line; the assistant
// role is "model"; each turn's content is trimmed.
MarkedText apply_gemma(std::span<const ChatMessage> msgs, bool gen) {
  Builder b;
  std::string system;
  bool first = true;
  for (const auto& m : msgs) {
    if (m.role == "system" && first) {
      system = std::string(trim(m.content));
      continue;
    }
    b.own("<start_of_turn>");
    if (m.role == "assistant") {
      b.own("model");
    } else {
      b.input(m.role);
    }
    b.own("\n");
    if (first && !system.empty()) {
      b.input(system);
      b.own("\n\n");
    }
    first = false;
    b.input(trim(m.content));
    b.own("<end_of_turn>\n");
  }
  if (gen) b.own("<start_of_turn>model\n");
  return std::move(b.out);
}

}  // namespace

Result<ChatTemplateKind> chat_template_detect(std::string_view jinja) {
  const auto has = [&](std::string_view s) { return jinja.find(s) != std::string_view::npos; };
  if (has("<|start_header_id|>") && has("<|eot_id|>")) return ChatTemplateKind::kLlama3;
  if (has("<|im_start|>")) return ChatTemplateKind::kChatml;
  if (has("[INST]") && has("[/INST]")) return ChatTemplateKind::kMistral;
  if (has("<start_of_turn>")) return ChatTemplateKind::kGemma;
  return make_error(ErrorCode::kUnsupported,
                    "unrecognised chat template; pass --chat-template chatml|llama3|mistral|gemma");
}

Result<ChatTemplateKind> chat_template_from_name(std::string_view name) {
  if (name == "chatml") return ChatTemplateKind::kChatml;
  if (name == "llama3") return ChatTemplateKind::kLlama3;
  if (name == "mistral") return ChatTemplateKind::kMistral;
  if (name == "gemma") return ChatTemplateKind::kGemma;
  return make_error(ErrorCode::kInvalidArgument, "unknown chat template '", name,
                    "'; expected chatml, llama3, mistral or gemma");
}

const char* chat_template_name(ChatTemplateKind kind) {
  switch (kind) {
    case ChatTemplateKind::kChatml:
      return "chatml";
    case ChatTemplateKind::kLlama3:
      return "llama3";
    case ChatTemplateKind::kMistral:
      return "mistral";
    case ChatTemplateKind::kGemma:
      return "gemma";
  }
  return "?";
}

std::string chat_template_apply(ChatTemplateKind kind, std::span<const ChatMessage> msgs,
                                bool add_generation_prompt) {
  return chat_template_apply_marked(kind, msgs, add_generation_prompt).text;
}

MarkedText chat_template_apply_marked(ChatTemplateKind kind, std::span<const ChatMessage> msgs,
                                      bool add_generation_prompt) {
  switch (kind) {
    case ChatTemplateKind::kChatml:
      return apply_chatml(msgs, add_generation_prompt);
    case ChatTemplateKind::kLlama3:
      return apply_llama3(msgs, add_generation_prompt);
    case ChatTemplateKind::kMistral:
      return apply_mistral(msgs, add_generation_prompt);
    case ChatTemplateKind::kGemma:
      return apply_gemma(msgs, add_generation_prompt);
  }
  return {};
}

}  // namespace agentkv
