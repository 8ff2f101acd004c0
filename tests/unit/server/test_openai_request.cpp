#include "server/openai_request.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace agentkv::server {
namespace {

using json = nlohmann::json;

enum class Endpoint { kCompletion, kChat };

struct Bad {
  const char* name;
  Endpoint endpoint;
  std::string body;
  int status;
  std::string param;  // expected "param" (empty: null)
};

ApiError error_of(Endpoint ep, const std::string& body, const RequestLimits& limits = {}) {
  if (ep == Endpoint::kCompletion) {
    auto r = parse_completion_request(body, limits);
    EXPECT_FALSE(r.ok()) << body;
    return r.ok() ? ApiError{} : r.error();
  }
  auto r = parse_chat_request(body, limits);
  EXPECT_FALSE(r.ok()) << body;
  return r.ok() ? ApiError{} : r.error();
}

const std::string kMsgs = R"("messages":[{"role":"user","content":"hi"}])";
std::string chat(const std::string& extra) { return "{" + kMsgs + (extra.empty() ? "" : "," + extra) + "}"; }
std::string comp(const std::string& extra) {
  return std::string(R"({"prompt":"hi")") + (extra.empty() ? "" : "," + extra) + "}";
}

// {"prompt":["a","a",...]} with n prompts.
std::string many_prompts(int n) {
  std::string s = R"({"prompt":[)";
  for (int i = 0; i < n; ++i) s += i ? R"(,"a")" : R"("a")";
  return s + "]}";
}

std::vector<Bad> bad_requests() {
  const Endpoint C = Endpoint::kCompletion, H = Endpoint::kChat;
  return {
      {"not_json", C, "hello", 400, ""},
      {"truncated", H, R"({"messages":[)", 400, ""},
      {"empty_body", C, "", 400, ""},
      {"top_level_array", C, "[1,2]", 400, ""},
      {"top_level_string", H, R"("x")", 400, ""},
      {"invalid_utf8_in_string", C, std::string("{\"prompt\":\"a\xff\xfe\"}"), 400, ""},
      {"invalid_utf8_overlong", H, std::string("{\"messages\":[{\"role\":\"user\",\"content\":\"\xc0\xaf\"}]}"), 400, ""},
      {"lone_surrogate_escape", C, R"({"prompt":"\ud800"})", 400, ""},
      {"deep_nesting", C, R"({"prompt":"a","x":)" + std::string(100, '[') + std::string(100, ']') + "}", 400, ""},
      {"duplicate_key", C, R"({"prompt":"a","max_tokens":1,"max_tokens":2})", 400, "max_tokens"},
      {"missing_prompt", C, R"({"model":"m"})", 400, "prompt"},
      {"prompt_number", C, R"({"prompt":5})", 400, "prompt"},
      {"prompt_empty_array", C, R"({"prompt":[]})", 400, "prompt"},
      {"prompt_non_int_tokens", C, R"({"prompt":[1,"a",3]})", 400, "prompt"},
      {"prompt_float_tokens", C, R"({"prompt":[1,2.5]})", 400, "prompt"},
      {"prompt_negative_token", C, R"({"prompt":[1,-2]})", 400, "prompt"},
      {"prompt_token_over_int32", C, R"({"prompt":[4294967296]})", 400, "prompt"},
      {"prompt_mixed_list", C, R"({"prompt":["a",[1]]})", 400, "prompt"},
      {"prompt_list_of_empty_ids", C, R"({"prompt":[[1],[]]})", 400, "prompt"},
      {"prompt_list_too_long", C, many_prompts(65), 400, "prompt"},
      {"prompt_nested_garbage", C, R"({"prompt":[{"a":[1]}]})", 400, "prompt"},
      {"prompt_object", C, R"({"prompt":{"text":"a"}})", 400, "prompt"},
      {"missing_messages", H, R"({"model":"m"})", 400, "messages"},
      {"messages_not_array", H, R"({"messages":"hi"})", 400, "messages"},
      {"empty_messages", H, R"({"messages":[]})", 400, "messages"},
      {"message_not_object", H, R"({"messages":["hi"]})", 400, "messages[0]"},
      {"bad_role", H, R"({"messages":[{"role":"wizard","content":"x"}]})", 400, "messages[0].role"},
      {"role_not_string", H, R"({"messages":[{"role":1,"content":"x"}]})", 400, "messages[0].role"},
      {"missing_role", H, R"({"messages":[{"content":"x"}]})", 400, "messages[0].role"},
      {"missing_user_content", H, R"({"messages":[{"role":"system","content":"s"},{"role":"user"}]})", 400,
       "messages[1].content"},
      {"content_number", H, R"({"messages":[{"role":"user","content":7}]})", 400, "messages[0].content"},
      {"content_image_part", H, R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})",
       400, "messages[0].content[0].type"},
      {"content_part_missing_text", H, R"({"messages":[{"role":"user","content":[{"type":"text"}]}]})", 400,
       "messages[0].content[0].text"},
      {"content_part_not_object", H, R"({"messages":[{"role":"user","content":["x"]}]})", 400, "messages[0].content[0]"},
      {"model_not_string", C, comp(R"("model":3)"), 400, "model"},
      {"max_tokens_zero", C, comp(R"("max_tokens":0)"), 400, "max_tokens"},
      {"max_tokens_negative", H, chat(R"("max_tokens":-5)"), 400, "max_tokens"},
      {"max_tokens_huge", C, comp(R"("max_tokens":1000000000000)"), 400, "max_tokens"},
      {"max_tokens_over_limit", C, comp(R"("max_tokens":4097)"), 400, "max_tokens"},
      {"max_tokens_float", C, comp(R"("max_tokens":5.0)"), 400, "max_tokens"},
      {"max_tokens_string", H, chat(R"("max_tokens":"5")"), 400, "max_tokens"},
      {"max_completion_tokens_zero", H, chat(R"("max_completion_tokens":0)"), 400, "max_completion_tokens"},
      {"temperature_string", C, comp(R"("temperature":"hot")"), 400, "temperature"},
      {"temperature_negative", H, chat(R"("temperature":-0.1)"), 400, "temperature"},
      {"temperature_too_high", H, chat(R"("temperature":2.5)"), 400, "temperature"},
      {"top_p_zero", C, comp(R"("top_p":0)"), 400, "top_p"},
      {"top_p_over_one", C, comp(R"("top_p":1.5)"), 400, "top_p"},
      {"seed_float", C, comp(R"("seed":1.5)"), 400, "seed"},
      {"stop_number", C, comp(R"("stop":1)"), 400, "stop"},
      {"stop_list_of_5", H, chat(R"("stop":["a","b","c","d","e"])"), 400, "stop"},
      {"stop_list_non_string", H, chat(R"("stop":["a",2])"), 400, "stop"},
      {"stop_empty_string", C, comp(R"("stop":"")"), 400, "stop"},
      {"n_17", C, comp(R"("n":17)"), 400, "n"},
      {"n_0", H, chat(R"("n":0)"), 400, "n"},
      {"n_float", H, chat(R"("n":2.0)"), 400, "n"},
      {"n_times_prompts_over_cap", C, R"({"prompt":["a","b","c","d","e"],"n":16})", 400, "n"},
      {"top_k_minus_2", C, comp(R"("top_k":-2)"), 400, "top_k"},
      {"top_k_float", H, chat(R"("top_k":4.5)"), 400, "top_k"},
      {"top_k_string", H, chat(R"("top_k":"4")"), 400, "top_k"},
      {"min_p_over_one", C, comp(R"("min_p":1.5)"), 400, "min_p"},
      {"min_p_string", H, chat(R"("min_p":"0.1")"), 400, "min_p"},
      {"repetition_penalty_zero", C, comp(R"("repetition_penalty":0)"), 400, "repetition_penalty"},
      {"repetition_penalty_negative", H, chat(R"("repetition_penalty":-1)"), 400, "repetition_penalty"},
      {"repetition_penalty_huge", H, chat(R"("repetition_penalty":1e300)"), 400, "repetition_penalty"},
      {"repetition_penalty_bool", H, chat(R"("repetition_penalty":true)"), 400, "repetition_penalty"},
      {"frequency_penalty_over", C, comp(R"("frequency_penalty":2.5)"), 400, "frequency_penalty"},
      {"frequency_penalty_under", H, chat(R"("frequency_penalty":-2.01)"), 400, "frequency_penalty"},
      {"presence_penalty_over", H, chat(R"("presence_penalty":3)"), 400, "presence_penalty"},
      {"presence_penalty_string", C, comp(R"("presence_penalty":"1")"), 400, "presence_penalty"},
      {"logit_bias_array_of_ints", C, comp(R"("logit_bias":[1,2])"), 400, "logit_bias"},
      {"logit_bias_pair_of_three", C, comp(R"("logit_bias":[[1,2,3]])"), 400, "logit_bias"},
      {"logit_bias_pair_text", H, chat(R"("logit_bias":[["hello",1]])"), 400, "logit_bias"},
      {"logit_bias_pair_true", H, chat(R"("logit_bias":[[5,true]])"), 400, "logit_bias"},
      {"logit_bias_pair_negative_id", H, chat(R"("logit_bias":[[-5,1]])"), 400, "logit_bias"},
      {"logit_bias_bool", C, comp(R"("logit_bias":true)"), 400, "logit_bias"},
      {"repeat_penalty_zero", C, comp(R"("repeat_penalty":0)"), 400, "repeat_penalty"},
      {"n_predict_zero", C, comp(R"("n_predict":0)"), 400, "n_predict"},
      {"n_predict_float", H, chat(R"("n_predict":4.5)"), 400, "n_predict"},
      {"logit_bias_non_numeric_key", H, chat(R"("logit_bias":{"abc":1})"), 400, "logit_bias"},
      {"logit_bias_negative_key", H, chat(R"("logit_bias":{"-1":1})"), 400, "logit_bias"},
      {"logit_bias_huge_key", H, chat(R"("logit_bias":{"99999999999":1})"), 400, "logit_bias"},
      {"logit_bias_value_string", C, comp(R"("logit_bias":{"5":"1"})"), 400, "logit_bias"},
      {"logit_bias_value_over", C, comp(R"("logit_bias":{"5":100.5})"), 400, "logit_bias"},
      {"logit_bias_value_under", H, chat(R"("logit_bias":{"5":-101})"), 400, "logit_bias"},
      {"stop_token_ids_int", C, comp(R"("stop_token_ids":5)"), 400, "stop_token_ids"},
      {"stop_token_ids_negative", C, comp(R"("stop_token_ids":[5,-1])"), 400, "stop_token_ids"},
      {"stop_token_ids_string", H, chat(R"("stop_token_ids":["5"])"), 400, "stop_token_ids"},
      {"ignore_eos_string", H, chat(R"("ignore_eos":"yes")"), 400, "ignore_eos"},
      {"stream_string", C, comp(R"("stream":"yes")"), 400, "stream"},
      {"stream_options_without_stream", H, chat(R"("stream_options":{"include_usage":true})"), 400, "stream_options"},
      {"stream_options_not_object", H, chat(R"("stream":true,"stream_options":true)"), 400, "stream_options"},
      {"include_usage_not_bool", H, chat(R"("stream":true,"stream_options":{"include_usage":1})"), 400,
       "stream_options.include_usage"},
      {"completion_logprobs_bool", C, comp(R"("logprobs":true)"), 400, "logprobs"},
      {"completion_logprobs_21", C, comp(R"("logprobs":21)"), 400, "logprobs"},
      {"completion_logprobs_negative", C, comp(R"("logprobs":-1)"), 400, "logprobs"},
      {"chat_logprobs_int", H, chat(R"("logprobs":1)"), 400, "logprobs"},
      {"chat_top_logprobs_21", H, chat(R"("logprobs":true,"top_logprobs":21)"), 400, "top_logprobs"},
      {"chat_top_logprobs_negative", H, chat(R"("logprobs":true,"top_logprobs":-1)"), 400, "top_logprobs"},
      {"chat_top_logprobs_without_logprobs", H, chat(R"("top_logprobs":2)"), 400, "top_logprobs"},
      {"cache_salt_number", C, comp(R"("cache_salt":1)"), 400, "cache_salt"},
      {"cache_salt_empty", H, chat(R"("cache_salt":"")"), 400, "cache_salt"},
      {"kv_sharing_array", H, chat(R"("kv_sharing":["x"])"), 400, "kv_sharing"},
      {"echo_string", C, comp(R"("echo":"true")"), 400, "echo"},
  };
}

TEST(OpenAIRequest, MalformedRequestsGiveTheRightError) {
  const auto cases = bad_requests();
  ASSERT_GE(cases.size(), 30u);
  for (const Bad& b : cases) {
    SCOPED_TRACE(b.name);
    const ApiError e = error_of(b.endpoint, b.body);
    EXPECT_EQ(e.status, b.status);
    EXPECT_EQ(e.type, "invalid_request_error");
    EXPECT_EQ(e.param, b.param);
    EXPECT_FALSE(e.message.empty());
    // The error body must always serialise and have OpenAI's shape.
    const json j = json::parse(to_json(e).dump());  // dump() throws on invalid UTF-8
    ASSERT_TRUE(j.contains("error"));
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    EXPECT_EQ(j["error"]["message"], e.message);
    if (b.param.empty()) {
      EXPECT_TRUE(j["error"]["param"].is_null());
    } else {
      EXPECT_EQ(j["error"]["param"], b.param);
    }
    EXPECT_TRUE(j["error"]["code"].is_null());
  }
}

TEST(OpenAIRequest, HugeBodyIs413) {
  RequestLimits limits;
  const std::string body = comp("\"pad\":\"" + std::string(kMaxBodyBytes, 'x') + "\"");
  const ApiError e = error_of(Endpoint::kCompletion, body, limits);
  EXPECT_EQ(e.status, 413);
  EXPECT_EQ(e.code, "request_too_large");
  // One byte under a smaller limit passes, one over fails.
  const std::string small = comp("");
  limits.max_body_bytes = small.size();
  EXPECT_TRUE(parse_completion_request(small, limits).ok());
  limits.max_body_bytes = small.size() - 1;
  EXPECT_EQ(error_of(Endpoint::kCompletion, small, limits).status, 413);
}

TEST(OpenAIRequest, PromptTokenLimitsComeFromTheCaller) {
  RequestLimits limits;
  limits.max_prompt_tokens = 3;
  EXPECT_TRUE(parse_completion_request(R"({"prompt":[1,2,3]})", limits).ok());
  EXPECT_EQ(error_of(Endpoint::kCompletion, R"({"prompt":[1,2,3,4]})", limits).param, "prompt");
  limits.vocab_size = 10;
  EXPECT_TRUE(parse_completion_request(R"({"prompt":[9]})", limits).ok());
  EXPECT_EQ(error_of(Endpoint::kCompletion, R"({"prompt":[10]})", limits).param, "prompt");
  EXPECT_EQ(error_of(Endpoint::kCompletion, R"({"prompt":[[1],[10]]})", limits).param, "prompt");
  // logit_bias and stop_token_ids ids are checked against the vocabulary too.
  EXPECT_TRUE(parse_completion_request(R"({"prompt":[1],"logit_bias":{"9":1},"stop_token_ids":[9]})", limits).ok());
  const ApiError bias = error_of(Endpoint::kCompletion, R"({"prompt":[1],"logit_bias":{"10":1}})", limits);
  EXPECT_EQ(bias.param, "logit_bias");
  EXPECT_NE(bias.message.find("token id 10 is not in [0, 9]"), std::string::npos) << bias.message;
  EXPECT_EQ(error_of(Endpoint::kChat, chat(R"("stop_token_ids":[10])"), limits).param, "stop_token_ids");
  limits.max_messages = 1;
  EXPECT_EQ(error_of(Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]})",
                     limits)
                .param,
            "messages");
}

TEST(OpenAIRequest, MaxTokensBoundIsTheCallers) {
  RequestLimits limits;
  limits.max_tokens = 100;
  auto ok = parse_completion_request(comp(R"("max_tokens":100)"), limits);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok.value().sampling.max_tokens, 100);
  EXPECT_EQ(error_of(Endpoint::kCompletion, comp(R"("max_tokens":101)"), limits).param, "max_tokens");
}

TEST(OpenAIRequest, CompletionRoundTrip) {
  const std::string body = R"({
    "model": "smol", "prompt": "Once upon", "max_tokens": 32, "temperature": 0.5, "top_p": 0.9,
    "seed": -7, "stop": ["\n", "END"], "stream": true, "stream_options": {"include_usage": true},
    "logprobs": 20, "n": 4, "echo": true, "cache_salt": "tenant-a", "kv_sharing": "prefix",
    "frequency_penalty": -2.0, "presence_penalty": 1.5, "repetition_penalty": 1.1, "top_k": 40, "min_p": 0.05,
    "logit_bias": {"50256": -100, "7": 2.5}, "stop_token_ids": [2, 0], "ignore_eos": true,
    "user": "ignored", "suffix": null, "best_of": null, "some_future_field": {"x": [1]}
  })";
  auto r = parse_completion_request(body, {});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const CompletionRequest& c = r.value();
  EXPECT_EQ(c.sampling.model, "smol");
  ASSERT_EQ(c.prompts.size(), 1u);
  EXPECT_FALSE(c.prompts[0].is_tokens);
  EXPECT_EQ(c.prompts[0].text, "Once upon");
  EXPECT_EQ(c.sampling.max_tokens, 32);
  EXPECT_FLOAT_EQ(c.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(c.sampling.top_p, 0.9f);
  EXPECT_EQ(c.sampling.seed, -7);
  EXPECT_EQ(c.sampling.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(c.sampling.stream);
  EXPECT_TRUE(c.sampling.include_usage);
  EXPECT_EQ(c.logprobs, 20);
  EXPECT_EQ(c.sampling.n, 4);
  EXPECT_FLOAT_EQ(c.sampling.frequency_penalty, -2.0f);
  EXPECT_FLOAT_EQ(c.sampling.presence_penalty, 1.5f);
  EXPECT_FLOAT_EQ(c.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(c.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(c.sampling.min_p, 0.05f);
  EXPECT_EQ(c.sampling.logit_bias, (std::vector<std::pair<int32_t, float>>{{50256, -100.0f}, {7, 2.5f}}));
  EXPECT_EQ(c.sampling.stop_token_ids, (std::vector<int32_t>{2, 0}));
  EXPECT_TRUE(c.sampling.ignore_eos);
  EXPECT_TRUE(c.echo);
  EXPECT_EQ(c.sampling.cache_salt, "tenant-a");
  EXPECT_EQ(c.sampling.kv_sharing, "prefix");
}

TEST(OpenAIRequest, CompletionDefaultsAndNulls) {
  auto r = parse_completion_request(
      R"({"prompt":"x","max_tokens":null,"temperature":null,"stop":null,"logprobs":null,"seed":null,"model":null})", {});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const CompletionRequest& c = r.value();
  EXPECT_EQ(c.sampling.model, "");
  EXPECT_FALSE(c.sampling.max_tokens.has_value());
  EXPECT_FLOAT_EQ(c.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(c.sampling.top_p, 1.0f);
  EXPECT_FALSE(c.sampling.seed.has_value());
  EXPECT_TRUE(c.sampling.stop.empty());
  EXPECT_FALSE(c.sampling.stream);
  EXPECT_FALSE(c.logprobs.has_value());
  EXPECT_FALSE(c.sampling.cache_salt.has_value());
  EXPECT_FALSE(c.sampling.kv_sharing.has_value());
  EXPECT_EQ(c.sampling.n, 1);
  EXPECT_EQ(c.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(c.sampling.min_p, 0.0f);
  EXPECT_FLOAT_EQ(c.sampling.repetition_penalty, 1.0f);
  EXPECT_FLOAT_EQ(c.sampling.frequency_penalty, 0.0f);
  EXPECT_FLOAT_EQ(c.sampling.presence_penalty, 0.0f);
  EXPECT_TRUE(c.sampling.logit_bias.empty());
  EXPECT_TRUE(c.sampling.stop_token_ids.empty());
  EXPECT_FALSE(c.sampling.ignore_eos);
  // vLLM's top_k = -1 means off, as 0 does.
  auto minus_one = parse_completion_request(R"({"prompt":"x","top_k":-1})", {});
  ASSERT_TRUE(minus_one.ok());
  EXPECT_EQ(minus_one.value().sampling.top_k, 0);
}

// llama-server's names for the same fields.
TEST(OpenAIRequest, LlamaServerAliases) {
  auto r = parse_completion_request(
      R"({"prompt":"x","repeat_penalty":1.3,"n_predict":7,"logit_bias":[[5,-2.5],[9,false]]})", {});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FLOAT_EQ(r.value().sampling.repetition_penalty, 1.3f);
  EXPECT_EQ(r.value().sampling.max_tokens, 7);
  EXPECT_EQ(r.value().sampling.logit_bias, (std::vector<std::pair<int32_t, float>>{{5, -2.5f}, {9, -100.0f}}));
  // OpenAI's names win; n_predict -1 means no limit.
  auto both = parse_completion_request(R"({"prompt":"x","repetition_penalty":1.1,"repeat_penalty":1.3,)"
                                       R"("max_tokens":3,"n_predict":7})",
                                       {});
  ASSERT_TRUE(both.ok());
  EXPECT_FLOAT_EQ(both.value().sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(both.value().sampling.max_tokens, 3);
  auto unlimited = parse_completion_request(R"({"prompt":"x","n_predict":-1})", {});
  ASSERT_TRUE(unlimited.ok());
  EXPECT_FALSE(unlimited.value().sampling.max_tokens.has_value());
  RequestLimits limits;
  limits.vocab_size = 10;
  EXPECT_EQ(error_of(Endpoint::kCompletion, R"({"prompt":"x","logit_bias":[[10,1]]})", limits).param, "logit_bias");
}

TEST(OpenAIRequest, PromptForms) {
  auto ids = parse_completion_request(R"({"prompt":[1,2,2147483647]})", {});
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids.value().prompts.size(), 1u);
  EXPECT_TRUE(ids.value().prompts[0].is_tokens);
  EXPECT_EQ(ids.value().prompts[0].tokens, (std::vector<int32_t>{1, 2, 2147483647}));
  auto nested = parse_completion_request(R"({"prompt":[[5,6]]})", {});
  ASSERT_TRUE(nested.ok());
  EXPECT_EQ(nested.value().prompts[0].tokens, (std::vector<int32_t>{5, 6}));
  auto one = parse_completion_request(R"({"prompt":["just one"]})", {});
  ASSERT_TRUE(one.ok());
  EXPECT_FALSE(one.value().prompts[0].is_tokens);
  EXPECT_EQ(one.value().prompts[0].text, "just one");
  // Lists of prompts, in order.
  auto texts = parse_completion_request(R"({"prompt":["a","b",""],"n":2})", {});
  ASSERT_TRUE(texts.ok());
  ASSERT_EQ(texts.value().prompts.size(), 3u);
  EXPECT_EQ(texts.value().prompts[1].text, "b");
  EXPECT_EQ(texts.value().prompts[2].text, "");
  auto id_lists = parse_completion_request(R"({"prompt":[[1,2],[3]]})", {});
  ASSERT_TRUE(id_lists.ok());
  ASSERT_EQ(id_lists.value().prompts.size(), 2u);
  EXPECT_EQ(id_lists.value().prompts[1].tokens, std::vector<int32_t>{3});
  // 4 prompts x 16 = 64 choices is the cap, and allowed.
  EXPECT_TRUE(parse_completion_request(R"({"prompt":["a","b","c","d"],"n":16})", {}).ok());
  auto single_stop = parse_completion_request(R"({"prompt":"p","stop":"###"})", {});
  ASSERT_TRUE(single_stop.ok());
  EXPECT_EQ(single_stop.value().sampling.stop, std::vector<std::string>{"###"});
  // Valid multi-byte UTF-8 and escapes survive as bytes.
  auto utf8 = parse_completion_request("{\"prompt\":\"caf\xc3\xa9 \\u00e9 \\ud83d\\ude00\"}", {});
  ASSERT_TRUE(utf8.ok());
  EXPECT_EQ(utf8.value().prompts[0].text, "caf\xc3\xa9 \xc3\xa9 \xf0\x9f\x98\x80");
}

TEST(OpenAIRequest, ChatRoundTrip) {
  const std::string body = R"({
    "model": "smol",
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hello, "}, {"type": "text", "text": "world"}]},
      {"role": "assistant", "content": null, "tool_calls": []},
      {"role": "tool", "content": "42", "tool_call_id": "call_1"},
      {"role": "user", "name": "bob", "content": ""}
    ],
    "max_tokens": 10, "max_completion_tokens": 20, "logprobs": true, "top_logprobs": 5,
    "stop": "x", "seed": 18446744073709551615
  })";
  // seed above int64 is out of range
  EXPECT_EQ(error_of(Endpoint::kChat, body).param, "seed");
  std::string ok_body = body;
  ok_body.replace(ok_body.find("18446744073709551615"), 20, "9223372036854775807");
  auto r = parse_chat_request(ok_body, {});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const ChatRequest& c = r.value();
  ASSERT_EQ(c.messages.size(), 5u);
  EXPECT_EQ(c.messages[0].role, "system");
  EXPECT_EQ(c.messages[0].content, "Be brief.");
  EXPECT_EQ(c.messages[1].content, "Hello, world");
  EXPECT_EQ(c.messages[2].role, "assistant");
  EXPECT_EQ(c.messages[2].content, "");
  EXPECT_EQ(c.messages[3].tool_call_id, "call_1");
  EXPECT_EQ(c.messages[4].name, "bob");
  EXPECT_EQ(c.sampling.max_tokens, 20);  // max_completion_tokens wins
  EXPECT_TRUE(c.logprobs);
  EXPECT_EQ(c.top_logprobs, 5);
  EXPECT_EQ(c.sampling.seed, INT64_MAX);
  EXPECT_EQ(c.sampling.stop, std::vector<std::string>{"x"});
}

TEST(OpenAIRequest, ChatDefaults) {
  auto r = parse_chat_request(chat(""), {});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.value().logprobs);
  EXPECT_EQ(r.value().top_logprobs, 0);
  EXPECT_FALSE(r.value().sampling.max_tokens.has_value());
  auto only_max = parse_chat_request(chat(R"("max_tokens":7)"), {});
  ASSERT_TRUE(only_max.ok());
  EXPECT_EQ(only_max.value().sampling.max_tokens, 7);
}

TEST(OpenAIRequest, DuplicateKeysInNestedObjectsAreRejectedButRepeatsAcrossObjectsAreNot) {
  EXPECT_EQ(error_of(Endpoint::kChat, R"({"messages":[{"role":"user","role":"system","content":"x"}]})").param, "role");
  auto ok = parse_chat_request(R"({"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]})", {});
  EXPECT_TRUE(ok.ok());
  // The same key in an inner and an outer object is no duplicate.
  EXPECT_TRUE(parse_completion_request(R"({"prompt":"p","x":{"prompt":1,"y":{"prompt":2}},"stream":false})", {}).ok());
  EXPECT_EQ(error_of(Endpoint::kCompletion, R"({"prompt":"p","x":{"y":{"k":1,"k":2}}})").param, "k");
}

TEST(OpenAIRequest, ErrorJsonShape) {
  const ApiError e = model_not_found("x");
  EXPECT_EQ(e.status, 404);
  const json j = to_json(e);
  EXPECT_EQ(j, json::parse(R"({"error":{"message":"The model 'x' does not exist","type":"invalid_request_error",
                                        "param":"model","code":"model_not_found"}})"));
}

}  // namespace
}  // namespace agentkv::server
