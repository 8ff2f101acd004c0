#include "server/openai_response.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace agentkv::server {
namespace {

using json = nlohmann::json;

ResponseMeta meta() { return {"chatcmpl-00000000000000ff", 1700000000, "smol"}; }

std::vector<TokenLogprob> sample_logprobs() {
  return {{"Hel", -0.25f, {{"Hel", -0.25f}, {"Hi", -1.5f}}}, {"lo", -0.5f, {{"lo", -0.5f}, {"p", -2.0f}}}};
}

TEST(OpenAIResponse, ResponseId) {
  EXPECT_EQ(format_response_id("cmpl", 255), "cmpl-00000000000000ff");
  EXPECT_EQ(format_response_id("chatcmpl", 0xFFFFFFFFFFFFFFFFull), "chatcmpl-ffffffffffffffff");
}

TEST(OpenAIResponse, CompletionObject) {
  Choice c;
  c.text = "Hello";
  c.finish_reason = "length";
  const json j = json::parse(dump_json(completion_response(meta(), c, {7, 2, 4})));
  EXPECT_EQ(j["id"], "chatcmpl-00000000000000ff");
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "smol");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["text"], "Hello");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(j["usage"]["completion_tokens"], 2);
  EXPECT_EQ(j["usage"]["total_tokens"], 9);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
}

TEST(OpenAIResponse, ChatCompletionObject) {
  Choice c;
  c.text = "Hi there";
  c.finish_reason = "stop";
  const json j = json::parse(dump_json(chat_completion_response(meta(), c, {3, 2, 0})));
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hi there");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["usage"]["total_tokens"], 5);
}

TEST(OpenAIResponse, CompletionLogprobsShape) {
  Choice c;
  c.text = "Hello";
  c.finish_reason = "stop";
  c.logprobs = sample_logprobs();
  c.text_offset = 10;
  const json lp = json::parse(dump_json(completion_response(meta(), c, {}))) ["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json::array({"Hel", "lo"}));
  EXPECT_FLOAT_EQ(lp["token_logprobs"][0].get<float>(), -0.25f);
  EXPECT_FLOAT_EQ(lp["token_logprobs"][1].get<float>(), -0.5f);
  ASSERT_EQ(lp["top_logprobs"].size(), 2u);
  EXPECT_FLOAT_EQ(lp["top_logprobs"][0]["Hi"].get<float>(), -1.5f);
  EXPECT_FLOAT_EQ(lp["top_logprobs"][1]["p"].get<float>(), -2.0f);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
  // Offsets: the start, then after "Hel" (3 bytes).
  EXPECT_EQ(lp["text_offset"], json::array({10, 13}));
}

// echo + logprobs: the prompt's first token has no score, written as null as OpenAI does.
TEST(OpenAIResponse, UnscoredEchoTokenIsNull) {
  Choice c;
  c.text = "Hello";
  c.logprobs = sample_logprobs();
  c.logprobs->insert(c.logprobs->begin(), TokenLogprob{"Say", 0.0f, {}, /*scored=*/false});
  const json lp = json::parse(dump_json(completion_response(meta(), c, {})))["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json::array({"Say", "Hel", "lo"}));
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_FLOAT_EQ(lp["token_logprobs"][1].get<float>(), -0.25f);
  EXPECT_EQ(lp["text_offset"], json::array({0, 3, 6}));
}

TEST(OpenAIResponse, SeveralChoicesAndUsageExtensions) {
  Choice a, b;
  a.text = "x";
  b.index = 1;
  b.text = "y";
  Usage u{10, 4, 8};
  u.prefilled_tokens = 14;
  u.kv_sharing = "icarus";
  const json j = completion_response(meta(), std::vector<Choice>{a, b}, u);
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_EQ(j["choices"][1]["text"], "y");
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["prefilled_tokens"], 14);
  EXPECT_EQ(j["usage"]["kv_sharing"], "icarus");
  // Unset extensions are omitted.
  const json plain = usage_json(Usage{1, 1, 0});
  EXPECT_FALSE(plain.contains("kv_sharing"));
  EXPECT_FALSE(plain["prompt_tokens_details"].contains("prefilled_tokens"));
  const json chunk = chat_chunk_delta(meta(), "t", std::nullopt, 3);
  EXPECT_EQ(chunk["choices"][0]["index"], 3);
}

TEST(OpenAIResponse, ChatLogprobsShapeWithBytes) {
  // "\xc3" is the first half of "é": not valid UTF-8 on its own.
  std::vector<TokenLogprob> lps = {{"\xc3", -0.1f, {{"\xc3", -0.1f}, {"a", -3.0f}}}, {"\xa9", -0.2f, {}}};
  Choice c;
  c.text = "\xc3\xa9";
  c.finish_reason = "stop";
  c.logprobs = lps;
  const std::string text = dump_json(chat_completion_response(meta(), c, {}));
  const json j = json::parse(text);  // parses: invalid bytes were replaced
  EXPECT_EQ(j["choices"][0]["message"]["content"], "\xc3\xa9");
  const json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["token"], "\xef\xbf\xbd");  // U+FFFD
  EXPECT_EQ(content[0]["bytes"], json::array({0xc3}));
  EXPECT_EQ(content[1]["bytes"], json::array({0xa9}));
  EXPECT_FLOAT_EQ(content[0]["logprob"].get<float>(), -0.1f);
  ASSERT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(content[0]["top_logprobs"][1]["token"], "a");
  EXPECT_EQ(content[0]["top_logprobs"][1]["bytes"], json::array({'a'}));
  EXPECT_TRUE(content[1]["top_logprobs"].is_array());
  EXPECT_TRUE(content[1]["top_logprobs"].empty());
}

// Splits an SSE stream into its data payloads, checking the framing.
std::vector<std::string> sse_payloads(const std::string& stream) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < stream.size()) {
    EXPECT_EQ(stream.compare(pos, 6, "data: "), 0) << "event at " << pos;
    const std::size_t end = stream.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos);
    if (end == std::string::npos) break;
    const std::string payload = stream.substr(pos + 6, end - pos - 6);
    EXPECT_EQ(payload.find('\n'), std::string::npos) << "a payload must be one line";
    out.push_back(payload);
    pos = end + 2;
  }
  return out;
}

TEST(OpenAIResponse, ChatStream) {
  const ResponseMeta m = meta();
  std::string stream = sse_event(chat_chunk_role(m));
  stream += sse_event(chat_chunk_delta(m, "Hel", std::nullopt));
  stream += sse_event(chat_chunk_delta(m, "lo\nworld", sample_logprobs()));
  stream += sse_event(chat_chunk_finish(m, "stop"));
  stream += sse_event(usage_chunk(m, {5, 2, 1}, /*chat=*/true));
  stream += sse_done();
  const auto payloads = sse_payloads(stream);
  ASSERT_EQ(payloads.size(), 6u);
  EXPECT_EQ(payloads.back(), "[DONE]");
  std::string text;
  for (std::size_t i = 0; i + 1 < payloads.size(); ++i) {
    const json j = json::parse(payloads[i]);
    EXPECT_EQ(j["object"], "chat.completion.chunk");
    EXPECT_EQ(j["id"], m.id);
    EXPECT_EQ(j["created"], m.created);
    EXPECT_EQ(j["model"], m.model);
    if (i == 4) {
      EXPECT_TRUE(j["choices"].empty());
      EXPECT_EQ(j["usage"]["total_tokens"], 7);
      EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 1);
      continue;
    }
    EXPECT_FALSE(j.contains("usage"));
    const json& ch = j["choices"][0];
    if (i == 0) {
      EXPECT_EQ(ch["delta"]["role"], "assistant");
    } else {
      EXPECT_FALSE(ch["delta"].contains("role"));
    }
    if (ch["delta"].contains("content")) text += ch["delta"]["content"].get<std::string>();
    if (i == 3) {
      EXPECT_EQ(ch["finish_reason"], "stop");
    } else {
      EXPECT_TRUE(ch["finish_reason"].is_null());
    }
    if (i == 2) {
      EXPECT_EQ(ch["logprobs"]["content"].size(), 2u);
    }
  }
  EXPECT_EQ(text, "Hello\nworld");
}

TEST(OpenAIResponse, CompletionStreamChunks) {
  Choice c;
  c.text = "abc";
  const json mid = completion_chunk(meta(), c);
  EXPECT_EQ(mid["object"], "text_completion");
  EXPECT_EQ(mid["choices"][0]["text"], "abc");
  EXPECT_TRUE(mid["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(mid.contains("usage"));
  c.text = "";
  c.finish_reason = "length";
  EXPECT_EQ(completion_chunk(meta(), c)["choices"][0]["finish_reason"], "length");
  const json u = usage_chunk(meta(), {1, 1, 0}, /*chat=*/false);
  EXPECT_EQ(u["object"], "text_completion");
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
}

}  // namespace
}  // namespace agentkv::server
