// Parsing and validation of the bodies of POST /v1/completions and
// POST /v1/chat/completions into typed structs. Pure functions of (body,
// limits): no engine, no tokenizer, so every malformed input is unit-tested
// and fuzzed here and the HTTP handlers stay thin.
//
// Conventions (as vLLM): unknown fields are ignored; a field set to JSON null
// is treated as absent; integers must be JSON integers (5.0 is rejected);
// duplicate keys in one object are rejected (nlohmann would silently keep the
// last one, so two proxies could disagree on what was asked).
// Every error is a 400 invalid_request_error naming the field, except a body
// over the size limit (413). Whether `model` names a served model (404
// model_not_found) and whether `kv_sharing` names a known scheme are for the
// caller to decide.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_error.h"

namespace agentkv::server {

inline constexpr std::size_t kMaxBodyBytes = 4u << 20;  // 4 MiB
inline constexpr int kMaxJsonDepth = 64;                // nesting of [ and {
inline constexpr int kMaxStopStrings = 4;                // as OpenAI
inline constexpr int kMaxTopLogprobs = 5;                // OpenAI allows 20; we cap at 5

struct RequestLimits {
  std::size_t max_body_bytes = kMaxBodyBytes;
  int max_tokens = 4096;                 // upper bound for max_tokens (e.g. context length)
  std::size_t max_prompt_tokens = 32768; // length bound for a token-id prompt
  std::size_t max_messages = 1024;
  int vocab_size = 0;                    // > 0: token ids must be < vocab_size
};

// Fields both endpoints share.
struct SamplingFields {
  std::string model;                      // empty when absent (the caller may default it)
  std::optional<int> max_tokens;          // absent: the caller picks (context left)
  float temperature = 1.0f;               // [0, 2]
  float top_p = 1.0f;                     // (0, 1]
  std::optional<int64_t> seed;
  std::vector<std::string> stop;          // <= 4 non-empty strings
  bool stream = false;
  bool include_usage = false;             // stream_options.include_usage
  std::optional<std::string> cache_salt;  // non-empty when present
  std::optional<std::string> kv_sharing;  // scheme name, validated by the caller
};

struct CompletionRequest {
  SamplingFields sampling;
  // Exactly one of the two is the prompt: text when !prompt_is_tokens.
  bool prompt_is_tokens = false;
  std::string prompt_text;
  std::vector<int32_t> prompt_tokens;
  std::optional<int> logprobs;            // 0..5 top alternatives per token; absent: none
  bool echo = false;
};

struct ChatMessage {
  std::string role;     // system | developer | user | assistant | tool
  std::string content;  // text parts joined with no separator
  std::string name;     // optional participant name
  std::string tool_call_id;  // role "tool" only
};

struct ChatRequest {
  SamplingFields sampling;
  std::vector<ChatMessage> messages;  // non-empty
  bool logprobs = false;
  int top_logprobs = 0;               // 0..5, only with logprobs
};

// The body as a JSON object, with the checks every endpoint shares: size
// (413), nesting depth, valid JSON, no duplicate keys, an object at the top.
ApiResult<nlohmann::json> parse_json_object(std::string_view body, const RequestLimits& limits);

ApiResult<CompletionRequest> parse_completion_request(std::string_view body, const RequestLimits& limits);
ApiResult<ChatRequest> parse_chat_request(std::string_view body, const RequestLimits& limits);

}  // namespace agentkv::server
