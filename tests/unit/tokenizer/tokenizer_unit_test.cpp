// Tokenizer behaviour on small hand-built vocabularies: GGUF key validation,
// special-token splitting, streaming decode, UTF-8 helpers, chat template
// detection and errors.
#include <gtest/gtest.h>

#include "../../ci_required.h"

#include <chrono>

#include "tokenizer/chat_template.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode.h"
#include "tokenizer_test_util.h"

namespace agentkv {
namespace {

Tokenizer tiny() {
  auto t = Tokenizer::create(test::tiny_bpe_vocab());
  EXPECT_TRUE(t.is_ok()) << t.status().message();
  return std::move(t).value();
}

int32_t id_of(const Tokenizer& t, const std::string& s) {
  auto id = t.find_token(s);
  EXPECT_TRUE(id.has_value()) << s;
  return id.value_or(-1);
}

TEST(Tokenizer, MergesByRank) {
  const Tokenizer t = tiny();
  // "hello" -> he, ll, hell, hello; " world" -> Ġw, or, Ġwor, ld (rank 9) then Ġworld (rank 8).
  const auto ids = t.encode("hello world", false, false);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0], id_of(t, "hello"));
  EXPECT_EQ(ids[1], id_of(t, "\xC4\xA0world"));
  EXPECT_EQ(t.decode(ids), "hello world");
  EXPECT_EQ(t.token_to_piece(ids[1]), " world");
}

TEST(Tokenizer, SpecialTokensOnlyWhenParsed) {
  const Tokenizer t = tiny();
  const auto parsed = t.encode("<|im_start|>hello<|im_end|>", true, true);
  ASSERT_EQ(parsed.size(), 3u);
  EXPECT_EQ(parsed[0], 1);
  EXPECT_EQ(parsed[2], 2);
  const auto plain = t.encode("<|im_start|>hello<|im_end|>", true, false);
  EXPECT_GT(plain.size(), 3u);
  for (int32_t id : plain) EXPECT_FALSE(t.is_control(id));
  EXPECT_EQ(t.decode(plain), "<|im_start|>hello<|im_end|>");
  EXPECT_EQ(t.decode(parsed, /*skip_special=*/true), "hello");
  EXPECT_TRUE(t.is_eog(2));
  EXPECT_FALSE(t.is_eog(1));
  EXPECT_EQ(t.vocab().eot_id, 2);  // auto-detected <|im_end|>
}

TEST(Tokenizer, AddsBosAndEosAsTheVocabSays) {
  Vocab v = test::tiny_bpe_vocab();
  v.add_bos = true;
  v.add_eos = true;
  auto t = Tokenizer::create(v);
  ASSERT_TRUE(t.is_ok());
  const auto ids = t->encode("hello", true, false);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 0);
  EXPECT_EQ(ids.back(), 2);
  EXPECT_EQ(t->encode("hello", false, false).size(), 1u);
}

TEST(Tokenizer, EveryByteSequenceRoundTrips) {
  const Tokenizer t = tiny();
  std::string all;
  for (int b = 255; b >= 0; --b) all += static_cast<char>(b);
  all += "\xE2\x82";  // truncated UTF-8 at the end
  EXPECT_EQ(t.decode(t.encode(all, false, false)), all);
  EXPECT_TRUE(t.encode("", true, true).empty());
  const std::vector<int32_t> bad = {-5, 1 << 30};
  EXPECT_EQ(t.decode(bad), "");
  EXPECT_EQ(t.token_to_piece(-1), "");
}

TEST(Tokenizer, CreateRejectsInconsistentVocab) {
  Vocab v = test::tiny_bpe_vocab();
  v.types.pop_back();
  EXPECT_FALSE(Tokenizer::create(v).is_ok());
  v = test::tiny_bpe_vocab();
  v.eos_id = static_cast<int32_t>(v.tokens.size());
  EXPECT_FALSE(Tokenizer::create(v).is_ok());
  v = test::tiny_bpe_vocab();
  v.merges.push_back("h zzz");
  auto r = Tokenizer::create(v);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("not in the vocabulary"), std::string::npos);
  v = test::tiny_bpe_vocab();
  v.pre = "some-future-model";
  r = Tokenizer::create(v);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("some-future-model"), std::string::npos);
}

Result<Vocab> vocab_of(const GgufWriter& w, int64_t need) {
  static std::vector<uint8_t> bytes;  // must outlive the parsed file
  bytes = w.to_bytes();
  auto f = GgufFile::parse(bytes);
  if (!f.is_ok()) return f.status();
  return vocab_from_gguf(*f, need);
}

TEST(VocabFromGguf, ReadsKeys) {
  const Vocab src = test::tiny_bpe_vocab();
  GgufWriter w = test::vocab_writer(src);
  w.add_string("tokenizer.chat_template", "{{ '<|im_start|>' }}");
  auto v = vocab_of(w, static_cast<int64_t>(src.tokens.size()));
  ASSERT_TRUE(v.is_ok()) << v.status().message();
  EXPECT_EQ(v->kind, Vocab::Kind::kBpe);
  EXPECT_EQ(v->tokens, src.tokens);
  EXPECT_EQ(v->merges, src.merges);
  EXPECT_EQ(v->types, src.types);
  EXPECT_EQ(v->bos_id, 0);
  EXPECT_EQ(v->eos_id, 2);
  EXPECT_EQ(v->chat_template, "{{ '<|im_start|>' }}");
}

TEST(VocabFromGguf, RejectsBadFiles) {
  const Vocab src = test::tiny_bpe_vocab();
  const int64_t n = static_cast<int64_t>(src.tokens.size());
  {  // model needs more rows than the vocabulary has
    auto v = vocab_of(test::vocab_writer(src), n + 10);
    ASSERT_FALSE(v.is_ok());
    EXPECT_NE(v.status().message().find("vocabulary has " + std::to_string(n) + " tokens, model needs " +
                                        std::to_string(n + 10)),
              std::string::npos)
        << v.status().message();
  }
  {  // missing tokens
    GgufWriter w;
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string_array("tokenizer.ggml.merges", {});
    EXPECT_FALSE(vocab_of(w, 0).is_ok());
  }
  {  // missing merges for BPE
    GgufWriter w;
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string_array("tokenizer.ggml.tokens", {"a"});
    EXPECT_FALSE(vocab_of(w, 0).is_ok());
  }
  {  // SPM without scores
    GgufWriter w;
    w.add_string("tokenizer.ggml.model", "llama");
    w.add_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"});
    EXPECT_FALSE(vocab_of(w, 0).is_ok());
  }
  {  // unknown model
    GgufWriter w;
    w.add_string("tokenizer.ggml.model", "bert");
    w.add_string_array("tokenizer.ggml.tokens", {"a"});
    EXPECT_FALSE(vocab_of(w, 0).is_ok());
  }
  {  // mistyped key
    GgufWriter w = test::vocab_writer(src);
    w.add_string("tokenizer.ggml.add_eos_token", "yes");
    EXPECT_FALSE(vocab_of(w, 0).is_ok());
  }
  {  // arrays disagree
    GgufWriter w;
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string_array("tokenizer.ggml.tokens", {"a", "b"});
    w.add_int32_array("tokenizer.ggml.token_type", {1});
    w.add_string_array("tokenizer.ggml.merges", {});
    EXPECT_FALSE(vocab_of(w, 0).is_ok());
  }
  {  // special id out of range
    GgufWriter w;
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string_array("tokenizer.ggml.tokens", {"a", "b"});
    w.add_string_array("tokenizer.ggml.merges", {});
    w.add_uint32("tokenizer.ggml.eos_token_id", 2);
    auto v = vocab_of(w, 0);
    ASSERT_FALSE(v.is_ok());
    EXPECT_NE(v.status().message().find("eos_token_id"), std::string::npos);
  }
}

TEST(StreamDecoder, HoldsBackSplitCharacters) {
  const Tokenizer t = tiny();
  // "é€" as single bytes: C3 A9 E2 82 AC; each byte is its own token here.
  const std::string text = "\xC3\xA9\xE2\x82\xAC!";
  const auto ids = t.encode(text, false, false);
  ASSERT_EQ(ids.size(), 6u);
  StreamDecoder d(t);
  std::vector<std::string> outs;
  for (int32_t id : ids) outs.push_back(d.push(id));
  EXPECT_EQ(outs[0], "");
  EXPECT_EQ(outs[1], "\xC3\xA9");
  EXPECT_EQ(outs[2], "");
  EXPECT_EQ(outs[3], "");
  EXPECT_EQ(outs[4], "\xE2\x82\xAC");
  EXPECT_EQ(outs[5], "!");
  EXPECT_EQ(d.flush(), "");
  // Control tokens produce no text; an unfinished sequence flushes as U+FFFD.
  StreamDecoder d2(t);
  EXPECT_EQ(d2.push(1), "");
  EXPECT_EQ(d2.push(ids[2]), "");
  EXPECT_EQ(d2.flush(), "\xEF\xBF\xBD");
  // A byte that can never start a character is replaced at once.
  StreamDecoder d3(t);
  EXPECT_EQ(d3.push(t.encode("\xFF", false, false)[0]), "\xEF\xBF\xBD");
}

TEST(Unicode, Utf8Helpers) {
  EXPECT_TRUE(utf8_is_valid("h\xC3\xA9llo \xF0\x9F\x98\x80"));
  EXPECT_FALSE(utf8_is_valid("\xC0\xAF"));      // overlong
  EXPECT_FALSE(utf8_is_valid("\xED\xA0\x80"));  // surrogate
  EXPECT_FALSE(utf8_is_valid("\xE2\x82"));      // truncated
  EXPECT_EQ(utf8_complete_prefix("ab\xE2\x82"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xF0\x9F\x98"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xED\xA0"), 4u);  // can never complete: not held back
  EXPECT_EQ(utf8_complete_prefix("ab\xC3\xA9"), 4u);
  EXPECT_EQ(cp_class('a'), CpClass::kLetter);
  EXPECT_EQ(cp_class(0x65E5), CpClass::kLetter);  // 日
  EXPECT_EQ(cp_class('7'), CpClass::kNumber);
  EXPECT_EQ(cp_class(0x00BD), CpClass::kNumber);  // ½
  EXPECT_EQ(cp_class(0x3000), CpClass::kSpace);
  EXPECT_EQ(cp_class(0x1C), CpClass::kOther);    // isspace() in Python, not White_Space
  EXPECT_EQ(cp_class(0x0301), CpClass::kOther);  // combining mark
}

TEST(PreTokenizer, NamesAndAliases) {
  EXPECT_EQ(*pre_tokenizer_from_name("default"), PreTokenizerKind::kGpt2);
  EXPECT_EQ(*pre_tokenizer_from_name("smollm"), PreTokenizerKind::kSmollm);
  EXPECT_EQ(*pre_tokenizer_from_name("llama-bpe"), PreTokenizerKind::kLlama3);
  EXPECT_EQ(*pre_tokenizer_from_name("qwen2"), PreTokenizerKind::kQwen2);
  EXPECT_FALSE(pre_tokenizer_from_name("bloom").is_ok());
}

TEST(ChatTemplate, DetectionAndNames) {
  EXPECT_EQ(*chat_template_detect("{{ '<|im_start|>' + message['role'] }}"), ChatTemplateKind::kChatml);
  auto bad = chat_template_detect("{{ messages }}");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message(), "unrecognised chat template; pass --chat-template chatml|llama3|mistral|gemma");
  EXPECT_EQ(*chat_template_detect("{{ '<start_of_turn>' + role }}"), ChatTemplateKind::kGemma);
  EXPECT_FALSE(chat_template_detect("").is_ok());
  EXPECT_EQ(*chat_template_from_name("llama3"), ChatTemplateKind::kLlama3);
  EXPECT_EQ(*chat_template_from_name("mistral"), ChatTemplateKind::kMistral);
  EXPECT_EQ(*chat_template_from_name("gemma"), ChatTemplateKind::kGemma);
  EXPECT_STREQ(chat_template_name(ChatTemplateKind::kGemma), "gemma");
  EXPECT_FALSE(chat_template_from_name("vicuna").is_ok());
}

TEST(ChatTemplate, MistralFoldsSystemIntoFirstUserTurn) {
  const std::vector<ChatMessage> msgs = {{"system", "Be brief."}, {"user", "Hi"}};
  EXPECT_EQ(chat_template_apply(ChatTemplateKind::kMistral, msgs, true), "[INST] Be brief.\n\nHi [/INST]");
}

// HF's Llama 3 template trims each message (`message['content'] | trim`):
// whitespace-only content leaves only the headers (the fuzzer found a
// 400-space message "losing" its content here; the template is right).
TEST(ChatTemplate, Llama3TrimsEachMessage) {
  const std::vector<ChatMessage> msgs = {{"user", "  \n Hi there \t"}, {"assistant", std::string(400, ' ')}};
  EXPECT_EQ(chat_template_apply(ChatTemplateKind::kLlama3, msgs, false),
            "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n<|eot_id|>");
}

// A long prompt must encode in well under 10 ms (Release build).
TEST(TokenizerPerf, LongPromptEncodesQuickly) {
  AGENTKV_REQUIRE(!test::file_exists(test::model_path()), "model file absent");
  auto f = GgufFile::open(test::model_path());
  ASSERT_TRUE(f.is_ok());
  auto v = vocab_from_gguf(*f, 0);
  ASSERT_TRUE(v.is_ok());
  auto tok = Tokenizer::create(std::move(v).value());
  ASSERT_TRUE(tok.is_ok());
  std::string text;
  for (const std::string& s : test::corpus()) text += s + "\n";
  while (tok->encode(text, false, true).size() < 2000) text += text;
  const auto t0 = std::chrono::steady_clock::now();
  const int reps = 5;
  size_t n = 0;
  for (int i = 0; i < reps; ++i) n = tok->encode(text, false, true).size();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
  std::printf("encode: %zu tokens from %zu bytes in %.3f ms\n", n, text.size(), ms);
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__)
  EXPECT_LT(ms * 2000.0 / static_cast<double>(n), 10.0);
#endif
}

}  // namespace
}  // namespace agentkv
