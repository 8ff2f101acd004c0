// JSON of OpenAI-compatible responses, built from plain structs so it does
// not depend on the engine: non-streamed completion / chat.completion
// objects, SSE stream chunks, and logprobs in each API's shape.
//
// Token texts are raw bytes and may be partial UTF-8 (a byte-fallback token
// that splits a character). JSON strings cannot hold that, so dump_json()
// writes invalid bytes as U+FFFD; chat logprobs also carry the exact bytes
// in "bytes", as OpenAI's do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace agentkv::server {

struct TopLogprob {
  std::string token;  // raw bytes of the token's text
  float logprob = 0.0f;
};

struct TokenLogprob {
  std::string token;  // the sampled token's text (raw bytes)
  float logprob = 0.0f;
  std::vector<TopLogprob> top;  // best alternatives, most likely first
  bool scored = true;           // false: logprob and top are null (an echoed prompt's first token)
};

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;  // prompt tokens served from the prefix cache
  int reused_tokens = 0;  // prompt tokens whose K/V came from a cached segment (segment reuse)
  // agentkv extensions (omitted when unset):
  std::string kv_sharing = {};  // "usage.kv_sharing": the scheme applied to the request
  bool lr_fallback = false;     // "usage.lr_fallback": lragent-baselr served by BaseShared rules (no shared-A group)
  int prefilled_tokens = -1;  // "prompt_tokens_details.prefilled_tokens": prompt tokens the model
                              // computed over all choices (n > 1 shares one prefill)
  // Segment reuse (with reused_tokens): "prompt_tokens_details.computed_token_layers",
  // the K/V entries (token x layer) the prefill computed, and ".reuse_rate", the share
  // of the prefilled positions' entries copied instead (ServeEvent::reuse_rate).
  int64_t computed_token_layers = 0;
  double reuse_rate = 0;
};

// What identifies a response; the same for every chunk of one stream.
struct ResponseMeta {
  std::string id;       // e.g. "cmpl-..." / "chatcmpl-..." (format_response_id)
  int64_t created = 0;  // unix seconds
  std::string model;
};

struct ToolCallOut {
  std::string id, name, arguments;
};

struct Choice {
  int index = 0;
  std::string text;           // completion text / assistant message content
  std::string finish_reason;  // "stop" | "length"; empty -> null (streaming, unfinished)
  std::optional<std::vector<TokenLogprob>> logprobs;  // absent -> "logprobs": null
  std::size_t text_offset = 0;  // completions: byte offset of text's start (prompt length when echoing)
  // return_token_ids (vLLM's extension): the generated token ids, "token_ids"; absent: omitted.
  // Agents that pass one another's output on append these instead of re-tokenizing the text.
  std::optional<std::vector<int32_t>> token_ids;
  // chat: the message's tool_calls (ids, type function, name, arguments as
  // JSON text); with them an empty content is null.
  std::vector<ToolCallOut> tool_calls;
};

// "<prefix>-<16 hex digits>", e.g. format_response_id("chatcmpl", n).
std::string format_response_id(const std::string& prefix, uint64_t n);

// Serialises with invalid UTF-8 replaced by U+FFFD (nlohmann would throw).
std::string dump_json(const nlohmann::json& j);

nlohmann::json usage_json(const Usage& u);

// completions: {"tokens", "token_logprobs", "top_logprobs": [{text: lp}], "text_offset"}.
// Offsets are byte offsets starting at `text_offset`.
nlohmann::json completion_logprobs_json(const std::vector<TokenLogprob>& lps, std::size_t text_offset);
// chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}.
nlohmann::json chat_logprobs_json(const std::vector<TokenLogprob>& lps);

// Non-streamed responses, with one or several choices (in the order given).
nlohmann::json completion_response(const ResponseMeta& meta, const std::vector<Choice>& choices, const Usage& usage);
nlohmann::json chat_completion_response(const ResponseMeta& meta, const std::vector<Choice>& choices,
                                        const Usage& usage);
nlohmann::json completion_response(const ResponseMeta& meta, const Choice& choice, const Usage& usage);
nlohmann::json chat_completion_response(const ResponseMeta& meta, const Choice& choice, const Usage& usage);

// Stream chunks (object "text_completion" / "chat.completion.chunk").
// A chat stream is: chat_chunk_role, chat_chunk_delta..., chat_chunk_finish,
// [usage_chunk when stream_options.include_usage], then sse_done().
nlohmann::json completion_chunk(const ResponseMeta& meta, const Choice& choice);
// `index` is the choice's (n > 1 interleaves the choices' chunks).
nlohmann::json chat_chunk_role(const ResponseMeta& meta, int index = 0);
nlohmann::json chat_chunk_delta(const ResponseMeta& meta, const std::string& text,
                                const std::optional<std::vector<TokenLogprob>>& logprobs, int index = 0);
// A piece of a tool call as a stream delta, as OpenAI sends them: the
// first names the call ({"tool_calls": [{"index", "id", "type": "function",
// "function": {"name", "arguments"}}]}), later ones have no id (only
// {"index", "function": {"arguments": piece}}). `call_index` counts the
// choice's calls.
nlohmann::json chat_chunk_tool_call(const ResponseMeta& meta, int call_index, const ToolCallOut& call, int index = 0);
nlohmann::json chat_chunk_finish(const ResponseMeta& meta, const std::string& finish_reason, int index = 0);
// The final usage chunk: "choices": [] and "usage" set. `chat` picks the object name.
nlohmann::json usage_chunk(const ResponseMeta& meta, const Usage& usage, bool chat);

// SSE framing: "data: <json>\n\n" and "data: [DONE]\n\n".
std::string sse_event(const nlohmann::json& j);
std::string sse_done();

}  // namespace agentkv::server
