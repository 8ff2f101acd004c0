// A parsed completions / chat request turned into the engine's terms: one
// ServeRequest per prompt (a chat request has one), with every sampling field
// mapped, and what the response needs (echo texts, logprobs, streaming).
// Separate from the handler so the mapping is one readable function.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agentkv/serving.h"
#include "server/api_error.h"
#include "server/completion_handler.h"
#include "server/openai_guided.h"

namespace agentkv::server {

struct Prepared {
  // One per prompt. Choice i * n + j runs prompts[i] with seeds[j]: the n
  // choices of a prompt differ only in their seed.
  std::vector<ServeRequest> prompts;
  std::vector<std::string> echo_texts;  // per prompt; completions with echo: put before the answer
  std::vector<uint64_t> seeds;          // n of them: seed + j as vLLM, or random when no seed was given
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  bool want_logprobs = false;
  bool want_token_ids = false;  // return_token_ids: choices carry their generated ids
  bool echo_logprobs = false;  // completions echo + logprobs: the prompt's tokens are scored too
  std::string model;           // the name the response carries: the base's or the adapter's
  // Chat with tools: the output is parsed for tool calls in tool_format
  // (tool_call_parser.h); required / named: only calls, no content.
  ToolChoice tool_choice = ToolChoice::kNone;
  ToolFormat tool_format = ToolFormat::kHermes;
  std::vector<std::string> bare_call_triggers;  // auto, Hermes: bare JSON calls (tool_calls.h)

  int n_choices() const { return static_cast<int>(prompts.size()) * n; }
};

ApiResult<Prepared> prepare_completion(const CompletionEnv& env, const std::string& body, bool chat);

}  // namespace agentkv::server
