#include "agentkv/text.h"

#include "agentkv/serving.h"
#include "tokenizer/chat_renderer.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace agentkv {

std::vector<int32_t> encode_text(const ServingEngine& engine, std::string_view text, bool add_special) {
  return engine.tokenizer().encode(text, add_special, /*parse_special=*/false);
}

std::string decode_tokens(const ServingEngine& engine, std::span<const int32_t> ids) {
  return engine.tokenizer().decode(ids);
}

Result<std::vector<int32_t>> encode_chat(const ServingEngine& engine, std::string_view messages_json) {
  const Tokenizer& tok = engine.tokenizer();
  AKV_ASSIGN_OR_RETURN(ChatRenderer chat, ChatRenderer::create(tok, ""));
  AKV_ASSIGN_OR_RETURN(MarkedText text, chat.render(messages_json, "", /*add_generation_prompt=*/true));
  return chat.tokenize(tok, text);
}

}  // namespace agentkv
