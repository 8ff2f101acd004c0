#include "server/openai_response.h"

#include <cstdio>

namespace agentkv::server {
namespace {

using json = nlohmann::json;

json bytes_json(const std::string& s) {
  json out = json::array();
  for (unsigned char c : s) out.push_back(static_cast<int>(c));
  return out;
}

json nullable(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

json header(const ResponseMeta& meta, const char* object) {
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

}  // namespace

std::string format_response_id(const std::string& prefix, uint64_t n) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(n));
  return prefix + "-" + hex;
}

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json usage_json(const Usage& u) {
  json out = {{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
  if (u.prefilled_tokens >= 0) out["prompt_tokens_details"]["prefilled_tokens"] = u.prefilled_tokens;
  if (u.reused_tokens > 0) {
    out["prompt_tokens_details"]["reused_tokens"] = u.reused_tokens;
    out["prompt_tokens_details"]["computed_token_layers"] = u.computed_token_layers;
    out["prompt_tokens_details"]["reuse_rate"] = u.reuse_rate;
  }
  if (!u.kv_sharing.empty()) out["kv_sharing"] = u.kv_sharing;
  if (u.lr_fallback) out["lr_fallback"] = true;
  return out;
}

json completion_logprobs_json(const std::vector<TokenLogprob>& lps, std::size_t text_offset) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
  std::size_t offset = text_offset;
  for (const TokenLogprob& t : lps) {
    tokens.push_back(t.token);
    offsets.push_back(offset);
    offset += t.token.size();
    if (!t.scored) {
      token_logprobs.push_back(nullptr);
      top.push_back(nullptr);
      continue;
    }
    token_logprobs.push_back(t.logprob);
    // A dict keyed by token text, as OpenAI's legacy API: equal texts merge.
    json alternatives = json::object();
    for (const TopLogprob& a : t.top) {
      if (!alternatives.contains(a.token)) alternatives[a.token] = a.logprob;
    }
    top.push_back(std::move(alternatives));
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top)},
          {"text_offset", std::move(offsets)}};
}

json chat_logprobs_json(const std::vector<TokenLogprob>& lps) {
  json content = json::array();
  for (const TokenLogprob& t : lps) {
    json top = json::array();
    for (const TopLogprob& a : t.top) {
      top.push_back({{"token", a.token}, {"logprob", a.logprob}, {"bytes", bytes_json(a.token)}});
    }
    content.push_back(
        {{"token", t.token}, {"logprob", t.logprob}, {"bytes", bytes_json(t.token)}, {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

json completion_response(const ResponseMeta& meta, const std::vector<Choice>& choices, const Usage& usage) {
  json out = header(meta, "text_completion");
  out["choices"] = json::array();
  for (const Choice& choice : choices) {
    json c = {{"index", choice.index}, {"text", choice.text}, {"finish_reason", nullable(choice.finish_reason)}};
    c["logprobs"] = choice.logprobs ? completion_logprobs_json(*choice.logprobs, choice.text_offset) : json(nullptr);
    if (choice.token_ids) c["token_ids"] = *choice.token_ids;
    out["choices"].push_back(std::move(c));
  }
  out["usage"] = usage_json(usage);
  return out;
}

namespace {
json tool_call_json(const ToolCallOut& t) {
  return {{"id", t.id}, {"type", "function"}, {"function", {{"name", t.name}, {"arguments", t.arguments}}}};
}
}  // namespace

json chat_completion_response(const ResponseMeta& meta, const std::vector<Choice>& choices, const Usage& usage) {
  json out = header(meta, "chat.completion");
  out["choices"] = json::array();
  for (const Choice& choice : choices) {
    json msg = {{"role", "assistant"}, {"content", choice.text}};
    if (!choice.tool_calls.empty()) {
      if (choice.text.empty()) msg["content"] = nullptr;
      msg["tool_calls"] = json::array();
      for (const ToolCallOut& t : choice.tool_calls) msg["tool_calls"].push_back(tool_call_json(t));
    }
    json c = {{"index", choice.index}, {"message", std::move(msg)}, {"finish_reason", nullable(choice.finish_reason)}};
    c["logprobs"] = choice.logprobs ? chat_logprobs_json(*choice.logprobs) : json(nullptr);
    if (choice.token_ids) c["token_ids"] = *choice.token_ids;
    out["choices"].push_back(std::move(c));
  }
  out["usage"] = usage_json(usage);
  return out;
}

json completion_response(const ResponseMeta& meta, const Choice& choice, const Usage& usage) {
  return completion_response(meta, std::vector<Choice>{choice}, usage);
}

json chat_completion_response(const ResponseMeta& meta, const Choice& choice, const Usage& usage) {
  return chat_completion_response(meta, std::vector<Choice>{choice}, usage);
}

json completion_chunk(const ResponseMeta& meta, const Choice& choice) {
  json out = header(meta, "text_completion");
  json c = {{"index", choice.index}, {"text", choice.text}, {"finish_reason", nullable(choice.finish_reason)}};
  c["logprobs"] = choice.logprobs ? completion_logprobs_json(*choice.logprobs, choice.text_offset) : json(nullptr);
  if (choice.token_ids) c["token_ids"] = *choice.token_ids;
  out["choices"] = json::array({std::move(c)});
  return out;
}

json chat_chunk_role(const ResponseMeta& meta, int index) {
  json out = header(meta, "chat.completion.chunk");
  out["choices"] = json::array({{{"index", index},
                                 {"delta", {{"role", "assistant"}, {"content", ""}}},
                                 {"logprobs", nullptr},
                                 {"finish_reason", nullptr}}});
  return out;
}

json chat_chunk_delta(const ResponseMeta& meta, const std::string& text,
                      const std::optional<std::vector<TokenLogprob>>& logprobs, int index) {
  json out = header(meta, "chat.completion.chunk");
  json c = {{"index", index}, {"delta", {{"content", text}}}, {"finish_reason", nullptr}};
  c["logprobs"] = logprobs ? chat_logprobs_json(*logprobs) : json(nullptr);
  out["choices"] = json::array({std::move(c)});
  return out;
}

json chat_chunk_tool_call(const ResponseMeta& meta, int call_index, const ToolCallOut& call, int index) {
  json out = header(meta, "chat.completion.chunk");
  json t = call.id.empty() ? json{{"function", {{"arguments", call.arguments}}}} : tool_call_json(call);
  t["index"] = call_index;
  json c = {{"index", index}, {"delta", {{"tool_calls", json::array({std::move(t)})}}}, {"finish_reason", nullptr}};
  c["logprobs"] = nullptr;
  out["choices"] = json::array({std::move(c)});
  return out;
}

json chat_chunk_finish(const ResponseMeta& meta, const std::string& finish_reason, int index) {
  json out = header(meta, "chat.completion.chunk");
  out["choices"] = json::array(
      {{{"index", index}, {"delta", json::object()}, {"logprobs", nullptr}, {"finish_reason", nullable(finish_reason)}}});
  return out;
}

json usage_chunk(const ResponseMeta& meta, const Usage& usage, bool chat) {
  json out = header(meta, chat ? "chat.completion.chunk" : "text_completion");
  out["choices"] = json::array();
  out["usage"] = usage_json(usage);
  return out;
}

std::string sse_event(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

std::string sse_done() { return "data: [DONE]\n\n"; }

}  // namespace agentkv::server
