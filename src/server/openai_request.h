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

#include "agentkv/kv_sharing_params.h"
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/api_error.h"
#include "server/openai_guided.h"

namespace agentkv::server {

inline constexpr std::size_t kMaxBodyBytes = 4u << 20;  // 4 MiB
inline constexpr int kMaxJsonDepth = 64;                // nesting of [ and {
inline constexpr int kMaxStopStrings = 4;                // as OpenAI
inline constexpr int kMaxTopLogprobs = 20;               // chat top_logprobs and completions logprobs (vLLM's default)
inline constexpr int kMaxN = 16;                         // choices per prompt (ours; OpenAI allows 128)
inline constexpr int kMaxChoices = 64;                   // prompts x n in one completions request (ours)
inline constexpr int kMaxStopTokenIds = 64;

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
  int top_k = 0;                          // >= -1; 0 and -1 (vLLM) are off
  float min_p = 0.0f;                     // [0, 1]
  float repetition_penalty = 1.0f;        // > 0 (vLLM / HF); 1 is off
  float frequency_penalty = 0.0f;         // [-2, 2] (OpenAI)
  float presence_penalty = 0.0f;          // [-2, 2] (OpenAI)
  std::vector<std::pair<int32_t, float>> logit_bias;  // {"id": bias}, bias in [-100, 100], id < vocab_size
  std::optional<int64_t> seed;
  int n = 1;                              // [1, kMaxN]
  std::vector<std::string> stop;          // <= 4 non-empty strings
  std::vector<int32_t> stop_token_ids;    // vLLM: ids that end generation (not emitted)
  bool ignore_eos = false;                // vLLM: keep generating past end-of-generation tokens
  bool return_token_ids = false;          // vLLM: each choice also carries its generated "token_ids"
  bool stream = false;
  bool include_usage = false;             // stream_options.include_usage
  std::optional<std::string> cache_salt;  // non-empty when present
  // "kv_sharing": a scheme name, or {"scheme": name, "ratio": x,
  // "recompute_tokens": n, "check_layer": n, "boundary_layer": n,
  // "overflow_blocks": n, "tail_tokens": n, "min_segment_tokens": n}.
  // Types are checked here; names and ranges by the caller and the engine.
  std::optional<std::string> kv_sharing;
  KvSharingParams kv_sharing_params;
  // Agent session: 1-128 of [A-Za-z0-9._:-]; the X-Session-ID header is the
  // same (the handler merges them). Retention in seconds, > 0.
  std::optional<std::string> session_id;
  std::optional<double> session_retention_s;
};

// A session id's syntax (body field or X-Session-ID header).
bool valid_session_id(std::string_view id);

// One prompt of a completions request: text, or token ids.
struct PromptInput {
  bool is_tokens = false;
  std::string text;
  std::vector<int32_t> tokens;
};

struct CompletionRequest {
  SamplingFields sampling;
  // "text", [ids], ["text", ...] or [[ids], ...]: one or more prompts. With
  // several, choice i * n + j answers prompt i (as OpenAI and vLLM).
  std::vector<PromptInput> prompts;       // 1 .. kMaxChoices / n
  std::optional<int> logprobs;            // 0..20 top alternatives per token; absent: none
  bool echo = false;
  GuidedFields guided;                    // response_format, guided_* (no tools here)
};

struct ChatMessage {
  std::string role;     // system | developer | user | assistant | tool
  std::string content;  // text parts joined with no separator
  std::string name;     // optional participant name
  std::string tool_call_id;  // role "tool" only
  std::vector<ToolCall> tool_calls;  // role "assistant": the calls it made
};

struct ChatRequest {
  SamplingFields sampling;
  std::vector<ChatMessage> messages;  // non-empty
  bool logprobs = false;
  int top_logprobs = 0;               // 0..20, only with logprobs
  GuidedFields guided;                // response_format, guided_*, tools, tool_choice
};

// The body as a JSON object, with the checks every endpoint shares: size
// (413), nesting depth, valid JSON, no duplicate keys, an object at the top.
ApiResult<nlohmann::json> parse_json_object(std::string_view body, const RequestLimits& limits);

ApiResult<CompletionRequest> parse_completion_request(std::string_view body, const RequestLimits& limits);
ApiResult<ChatRequest> parse_chat_request(std::string_view body, const RequestLimits& limits);

}  // namespace agentkv::server
