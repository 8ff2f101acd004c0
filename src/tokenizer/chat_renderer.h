// How a chat conversation becomes a prompt's tokens for one model: the model
// file's own Jinja template (tokenizer.chat_template) when it has one, as
// vLLM, SGLang and llama.cpp --jinja render it; a built-in template
// (chat_template.h) only for a file that has none, or when asked for by name.
//
// Content never becomes control tokens: what the request supplied (roles,
// content, tools, tool arguments) is marked while rendering and tokenized as
// plain text (Tokenizer::encode_marked); only the template's own text may
// yield special tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_template.h"
#include "tokenizer/jinja_template.h"
#include "tokenizer/marked_text.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace agentkv {

class ChatRenderer {
 public:
  // choice: "" (the model's own template), a built-in's name (chatml, llama3,
  // mistral) or the path of a .jinja file.
  static Result<ChatRenderer> create(const Tokenizer& tok, std::string_view choice,
                                     const JinjaLimits& limits = {});

  // For the log: "the model's own chat template (Jinja, 2,509 bytes)", or
  // "the built-in chatml template (the model file has none)".
  const std::string& description() const { return description_; }
  // The family whose control text the template writes, for the tool-call
  // format (absent for a Jinja template none of the built-ins resembles).
  std::optional<ChatTemplateKind> family() const { return family_; }
  // A Jinja template that reads `tools`: it renders tools, calls and results
  // in its own words, and gets them as OpenAI gives them.
  bool renders_tools() const { return renders_tools_; }
  // The Jinja source (empty for a built-in).
  const std::string& source() const;

  // messages_json: a JSON array of OpenAI-shaped messages (role, content,
  // tool_calls with arguments as objects, tool_call_id, name); tools_json: a
  // JSON array of tools, or empty for none. A built-in reads only each
  // message's role and content.
  Result<MarkedText> render(std::string_view messages_json, std::string_view tools_json,
                            bool add_generation_prompt) const;
  Result<MarkedText> render(std::span<const ChatMessage> msgs, bool add_generation_prompt) const;

  // The prompt's tokens: BOS as the vocabulary says, never twice (a template
  // that writes bos_token at the start has it removed first).
  std::vector<int32_t> tokenize(const Tokenizer& tok, const MarkedText& text) const;

 private:
  ChatRenderer() = default;
  std::optional<JinjaTemplate> jinja_;
  ChatTemplateKind builtin_ = ChatTemplateKind::kChatml;  // when !jinja_
  std::optional<ChatTemplateKind> family_;
  bool renders_tools_ = false;
  std::string description_;
  std::string bos_text_, eos_text_;
};

}  // namespace agentkv
