// libFuzzer target for the OpenAI request parsers. For any bytes, both
// parse_completion_request and parse_chat_request must return (never crash or
// throw), and:
//   - an error serialises with plain dump() (which throws on invalid UTF-8)
//     and has status 400 or 413;
//   - a parsed request holds the validated invariants (max_tokens in range,
//     <= 4 stop strings, logprobs <= 5, non-empty messages, bounded prompt);
//   - the parsed strings are valid UTF-8 (they round-trip through dump()).
// The input is also used as a token text for the response builders, whose
// output (invalid bytes replaced) must parse back as JSON.
// Seed corpus: AGENTKV_FUZZ_WRITE_SEEDS=<dir> fuzz_request -runs=0 writes a
// few valid requests of each endpoint into <dir> and exits (scripts/fuzz.sh).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/openai_request.h"
#include "fuzz_support.h"
#include "server/openai_response.h"

using namespace agentkv::server;
namespace fuzz = agentkv::fuzz;
using json = nlohmann::json;

namespace {

using fuzz::check;

void check_error(const ApiError& e) {
  check(e.status == 400 || e.status == 413, "error status is 400 or 413");
  check(!e.message.empty(), "error has a message");
  const std::string body = to_json(e).dump();  // throws (-> crash) on invalid UTF-8
  check(json::parse(body)["error"]["message"] == e.message, "error body round-trips");
}

void check_sampling(const SamplingFields& s, const RequestLimits& limits) {
  check(!s.max_tokens || (*s.max_tokens >= 1 && *s.max_tokens <= limits.max_tokens), "max_tokens in range");
  check(s.stop.size() <= static_cast<std::size_t>(kMaxStopStrings), "at most 4 stop strings");
  for (const std::string& stop : s.stop) check(!stop.empty(), "stop strings non-empty");
  check(s.temperature >= 0.0f && s.temperature <= 2.0f, "temperature in range");
  check(s.top_p > 0.0f && s.top_p <= 1.0f, "top_p in range");
  check(s.stream || !s.include_usage, "include_usage only when streaming");
  check(s.top_k >= 0, "top_k normalised (-1 is 0)");
  check(s.min_p >= 0.0f && s.min_p <= 1.0f, "min_p in range");
  check(s.repetition_penalty > 0.0f && std::isfinite(s.repetition_penalty), "repetition_penalty in range");
  check(std::abs(s.frequency_penalty) <= 2.0f && std::abs(s.presence_penalty) <= 2.0f, "penalties in range");
  check(s.n >= 1 && s.n <= kMaxN, "n in range");
  for (const auto& [id, bias] : s.logit_bias) {
    check(id >= 0 && id < limits.vocab_size && std::abs(bias) <= 100.0f, "logit_bias in range");
  }
  for (int32_t t : s.stop_token_ids) check(t >= 0 && t < limits.vocab_size, "stop_token_ids in vocabulary");
  json strings = {s.model, s.stop};
  (void)strings.dump();
}

void write_seeds(const std::string& dir) {
  const char* seeds[] = {
      R"({"model":"m","prompt":"Once","max_tokens":16,"temperature":0.5,"stop":["a","b"],"stream":true,)"
      R"("stream_options":{"include_usage":true},"logprobs":2})",
      R"({"prompt":[1,2,3],"seed":5,"n":1,"echo":false,"cache_salt":"s","kv_sharing":"prefix"})",
      R"({"prompt":[[7,8]],"top_p":0.9,"stop":"\n"})",
      R"({"prompt":["a","b"],"n":3,"top_k":-1,"min_p":0.1,"repetition_penalty":1.1,"frequency_penalty":-2,)"
      R"("presence_penalty":0.5,"logit_bias":{"5":-100,"7":3.5},"stop_token_ids":[2],"ignore_eos":true})",
      R"({"messages":[{"role":"system","content":"x"},{"role":"user","content":[{"type":"text","text":"hi"}]}],)"
      R"("logprobs":true,"top_logprobs":3,"max_completion_tokens":5,"top_p":0.9})",
      R"({"messages":[{"role":"assistant","content":null},{"role":"tool","content":"1","tool_call_id":"c"}],)"
      R"("stream":true,"seed":-1})",
  };
  fuzz::write_text_seeds(dir, "seed", seeds);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) { return fuzz::write_seeds_if_asked(write_seeds); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  RequestLimits limits;
  limits.max_tokens = 512;
  limits.max_prompt_tokens = 64;
  limits.max_messages = 16;
  limits.vocab_size = 49152;

  auto completion = parse_completion_request(body, limits);
  if (!completion.ok()) {
    check_error(completion.error());
  } else {
    const CompletionRequest& r = completion.value();
    check_sampling(r.sampling, limits);
    check(!r.logprobs || (*r.logprobs >= 0 && *r.logprobs <= kMaxTopLogprobs), "logprobs in range");
    check(!r.prompts.empty() && r.prompts.size() * r.sampling.n <= static_cast<std::size_t>(kMaxChoices),
          "prompts x n within the cap");
    for (const PromptInput& p : r.prompts) {
      if (p.is_tokens) {
        check(!p.tokens.empty() && p.tokens.size() <= limits.max_prompt_tokens, "prompt length");
        for (int32_t t : p.tokens) check(t >= 0 && t < limits.vocab_size, "token id in vocabulary");
      } else {
        (void)json(p.text).dump();
      }
    }
  }

  auto chat = parse_chat_request(body, limits);
  if (!chat.ok()) {
    check_error(chat.error());
  } else {
    const ChatRequest& r = chat.value();
    check_sampling(r.sampling, limits);
    check(!r.messages.empty() && r.messages.size() <= limits.max_messages, "message count");
    check(r.top_logprobs >= 0 && r.top_logprobs <= kMaxTopLogprobs, "top_logprobs in range");
    check(r.logprobs || r.top_logprobs == 0, "top_logprobs only with logprobs");
    for (const ChatMessage& m : r.messages) (void)json({m.role, m.content, m.name, m.tool_call_id}).dump();
  }

  // Arbitrary bytes as generated text and token texts.
  const std::string text(body);
  Choice choice;
  choice.text = text;
  choice.finish_reason = "stop";
  choice.logprobs = std::vector<TokenLogprob>{{text, -1.0f, {{text, -1.0f}, {"x", -2.0f}}}};
  const ResponseMeta meta{"chatcmpl-0", 0, "m"};
  const json chat_resp = json::parse(dump_json(chat_completion_response(meta, choice, {})));
  check(chat_resp["choices"][0]["logprobs"]["content"][0]["bytes"].size() == text.size(), "bytes hold every byte");
  (void)json::parse(dump_json(completion_response(meta, choice, {})));
  const std::string event = sse_event(chat_chunk_delta(meta, text, std::nullopt));
  check(event.rfind("data: ", 0) == 0 && event.size() >= 8 && event.substr(event.size() - 2) == "\n\n",
        "SSE framing");
  check(event.find('\n') == event.size() - 2, "SSE payload is one line");
  return 0;
}
