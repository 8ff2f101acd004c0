#include "tokenizer/chat_renderer.h"

#include <fstream>
#include <iterator>
#include <utility>

#include <nlohmann/json.hpp>

namespace agentkv {

namespace {

using json = nlohmann::json;

std::string token_text(const Vocab& v, int32_t id) {
  return id >= 0 && id < static_cast<int32_t>(v.tokens.size()) ? v.tokens[id] : std::string();
}

Result<std::string> read_template_file(std::string_view path, size_t max_bytes) {
  std::ifstream f{std::string(path), std::ios::binary};
  if (!f) {
    return make_error(ErrorCode::kNotFound, "--chat-template '", path,
                      "' is neither chatml, llama3, mistral, gemma nor a readable .jinja file");
  }
  std::string s;
  s.resize(max_bytes + 1);
  f.read(s.data(), static_cast<std::streamsize>(s.size()));
  s.resize(static_cast<size_t>(f.gcount()));
  if (s.size() > max_bytes) {
    return make_error(ErrorCode::kInvalidArgument, "the chat template file '", path, "' is above the limit of ",
                      max_bytes, " bytes");
  }
  return s;
}

std::string with_commas(size_t n) {
  const std::string digits = std::to_string(n);
  std::string s;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}

}  // namespace

Result<ChatRenderer> ChatRenderer::create(const Tokenizer& tok, std::string_view choice, const JinjaLimits& limits) {
  ChatRenderer r;
  const Vocab& v = tok.vocab();
  r.bos_text_ = token_text(v, v.bos_id);
  r.eos_text_ = token_text(v, v.eos_id);
  std::string source;
  if (!choice.empty()) {
    if (Result<ChatTemplateKind> k = chat_template_from_name(choice); k.is_ok()) {
      r.builtin_ = r.family_.emplace(*k);
      r.description_ = "the built-in " + std::string(chat_template_name(*k)) + " template (--chat-template)";
      return r;
    }
    AKV_ASSIGN_OR_RETURN(source, read_template_file(choice, limits.max_source_bytes));
    r.description_ = "the chat template in " + std::string(choice) + " (Jinja, " + with_commas(source.size()) +
                     " bytes)";
  } else if (v.chat_template.empty()) {
    // Gemma's turn markers in the vocabulary (a base Gemma 3 file has no
    // template): its format; chatml otherwise, as llama.cpp falls back.
    const bool gemma = tok.find_token("<start_of_turn>").has_value() && tok.find_token("<end_of_turn>").has_value();
    const ChatTemplateKind k = gemma ? ChatTemplateKind::kGemma : ChatTemplateKind::kChatml;
    r.builtin_ = r.family_.emplace(k);
    r.description_ = std::string("the built-in ") + chat_template_name(k) +
                     " template (the model file has no tokenizer.chat_template" +
                     (gemma ? "; its vocabulary has Gemma's <start_of_turn>)" : ")");
    return r;
  } else {
    source = v.chat_template;
    r.description_ = "the model's own chat template (Jinja, " + with_commas(source.size()) + " bytes)";
  }
  if (Result<ChatTemplateKind> k = chat_template_detect(source); k.is_ok()) r.family_ = *k;
  r.renders_tools_ = source.find("tools") != std::string::npos;
  AKV_ASSIGN_OR_RETURN(JinjaTemplate t, JinjaTemplate::compile(std::move(source), limits));
  r.jinja_.emplace(std::move(t));
  return r;
}

const std::string& ChatRenderer::source() const {
  static const std::string kNone;
  return jinja_ ? jinja_->source() : kNone;
}

Result<MarkedText> ChatRenderer::render(std::string_view messages_json, std::string_view tools_json,
                                        bool add_generation_prompt) const {
  json msgs = json::parse(messages_json, nullptr, /*allow_exceptions=*/false);
  if (!msgs.is_array()) return make_error(ErrorCode::kInvalidArgument, "messages is not a JSON array");
  if (!jinja_) {
    std::vector<ChatMessage> turns;
    for (const json& m : msgs) {
      ChatMessage t;
      if (m.is_object() && m.contains("role") && m["role"].is_string()) t.role = m["role"].get<std::string>();
      if (m.is_object() && m.contains("content") && m["content"].is_string())
        t.content = m["content"].get<std::string>();
      turns.push_back(std::move(t));
    }
    return chat_template_apply_marked(builtin_, turns, add_generation_prompt);
  }
  std::string input = "{\"messages\":" + std::string(messages_json);
  if (!tools_json.empty()) input += ",\"tools\":" + std::string(tools_json);
  input += "}";
  const json own = {{"bos_token", bos_text_}, {"eos_token", eos_text_}, {"add_generation_prompt", add_generation_prompt}};
  return jinja_->render(input, own.dump());
}

Result<MarkedText> ChatRenderer::render(std::span<const ChatMessage> msgs, bool add_generation_prompt) const {
  if (!jinja_) return chat_template_apply_marked(builtin_, msgs, add_generation_prompt);
  json arr = json::array();
  for (const ChatMessage& m : msgs) arr.push_back({{"role", m.role}, {"content", m.content}});
  return render(arr.dump(), "", add_generation_prompt);
}

std::vector<int32_t> ChatRenderer::tokenize(const Tokenizer& tok, const MarkedText& text) const {
  const Vocab& v = tok.vocab();
  std::string_view body = text.text;
  size_t cut = 0;
  const bool bos_first = !bos_text_.empty() && body.starts_with(bos_text_) &&
                         (text.input_spans.empty() || text.input_spans.front().begin >= bos_text_.size());
  if (v.add_bos && bos_first) cut = bos_text_.size();
  std::vector<TextSpan> spans;
  spans.reserve(text.input_spans.size());
  for (const TextSpan& s : text.input_spans) spans.push_back({s.begin - cut, s.end - cut});
  return tok.encode_marked(body.substr(cut), spans, /*add_special=*/true);
}

}  // namespace agentkv
