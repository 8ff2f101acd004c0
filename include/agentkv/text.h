// Text to token ids and back with the served model's tokenizer and chat
// template, for programs that embed the engine (ServingEngine takes and
// gives token ids; its events also carry the text).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agentkv/status.h"

namespace agentkv {

class ServingEngine;

// add_special: the beginning-of-sequence token where the vocabulary asks for
// one. Text is never read as a control token ("<|im_start|>" in the text is
// its characters).
std::vector<int32_t> encode_text(const ServingEngine& engine, std::string_view text, bool add_special = true);
std::string decode_tokens(const ServingEngine& engine, std::span<const int32_t> ids);

// A conversation, as a JSON array of OpenAI-shaped messages, rendered by the
// model file's own chat template (or the built-in one for its family when the
// file has none) with the assistant's turn opened: what a chat request
// prefills. Errors: kInvalidArgument (not a JSON array, or the template
// refused it, with its message).
Result<std::vector<int32_t>> encode_chat(const ServingEngine& engine, std::string_view messages_json);

}  // namespace agentkv
