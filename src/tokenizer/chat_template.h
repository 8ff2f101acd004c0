// The built-in chat templates, for model files that have none (ChatRenderer
// renders a file's own Jinja template). Each function reproduces the family's
// Hugging Face chat template, except that the BOS token is never part of the
// text: encode(..., add_special=true) adds it as the vocabulary says, so it is
// not added twice.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "tokenizer/marked_text.h"
#include "util/status.h"

namespace agentkv {

struct ChatMessage {
  std::string role, content;
};

enum class ChatTemplateKind {
  kChatml,   // <|im_start|>role\n...<|im_end|>\n (SmolLM2, Qwen); SmolLM2's default system prompt
  kLlama3,   // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
  kMistral,  // [INST] user [/INST]assistant</s> (Mistral v1 / Llama 2 style)
  kGemma,    // <start_of_turn>user\n...<end_of_turn>\n, assistant as "model", system folded into the first user turn
};

// Recognises the family from tokenizer.chat_template (distinctive markers).
Result<ChatTemplateKind> chat_template_detect(std::string_view jinja);
// "chatml", "llama3", "mistral" or "gemma".
Result<ChatTemplateKind> chat_template_from_name(std::string_view name);
const char* chat_template_name(ChatTemplateKind kind);

// Formats the conversation; add_generation_prompt appends the assistant header.
std::string chat_template_apply(ChatTemplateKind kind, std::span<const ChatMessage> msgs,
                                bool add_generation_prompt);
// The same text, with the messages' roles and content marked as input.
MarkedText chat_template_apply_marked(ChatTemplateKind kind, std::span<const ChatMessage> msgs,
                                      bool add_generation_prompt);

}  // namespace agentkv
