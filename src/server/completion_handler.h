// POST /v1/completions and /v1/chat/completions: parse, tokenize, submit to
// the engine, answer with one JSON object or an SSE stream.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "agentkv/serving.h"
#include "grammar/grammar_cache.h"
#include "server/api_error.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/tool_format.h"
#include "tokenizer/chat_renderer.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace agentkv::server {

// What one completion request needs from the server.
struct CompletionEnv {
  ServingEngine* engine = nullptr;
  ServerMetrics* metrics = nullptr;
  std::string model_name;  // the base's served name; adapters are looked up in the engine
  RequestLimits limits;
  const ChatRenderer* chat = nullptr;  // null: chat requests fail with chat_error
  std::string chat_error;
  bool template_tools = false;  // the template renders tools, calls and results (else agentkv's wording)
  bool bare_tool_calls = true;  // auto, Hermes: a bare {"name": "TOOL" object is a call too (tool_calls.h)
  ToolFormat tool_format = ToolFormat::kHermes;  // how tools and calls are written (tool_format.h)
  GrammarCache* grammars = nullptr;  // null: constrained requests fail with grammars_error
  std::string grammars_error;
  std::string tenant;
  std::string session_header;            // X-Session-ID ("" when absent)
  double session_retention_s = 60;       // default for requests naming a session
  double session_max_retention_s = 3600;
  uint64_t serial = 0;  // makes the response id
  // Called exactly once, when the response has been written or abandoned
  // (for a stream: after its last chunk, from the releaser of httplib's
  // content provider).
  std::function<void()> on_finished;
};

void handle_completion(CompletionEnv env, const httplib::Request& req, httplib::Response& res, bool chat);

// Writes `e` as the response: status and OpenAI's JSON error body.
void write_error(httplib::Response& res, const ApiError& e);

// "stop" / "length" for finished requests; "" otherwise.
const char* finish_reason_name(ServeFinish f);

}  // namespace agentkv::server
