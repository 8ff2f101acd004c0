// libFuzzer target for the tokenizer. Builds small fixed tokenizers once (a
// byte-level BPE vocabulary under each pre-tokenizer, a SentencePiece one,
// and the real model's when AGENTKV_MODEL names a GGUF file), then for any
// input checks:
//   - pre-tokenizer pieces concatenate back to the input;
//   - byte-level BPE: decode(encode(s)) == s for any bytes (less the bytes the
//     vocabulary has no token for: the model's lacks a few, dropped as by HF);
//   - SentencePiece: decode(encode(s)) == s for valid UTF-8 without a leading
//     space or U+2581 (both decode to a plain space);
//   - StreamDecoder emits exactly decode(ids) for valid UTF-8, and valid
//     UTF-8 for anything;
//   - chat template detection / formatting never crash.
// Byte 0 of the input picks the tokenizer and flags; the rest is the text.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.h"
#include "format/gguf.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

using namespace agentkv;

namespace {

using fuzz::check;

std::string byte_char(int b) {
  const auto printable = [](int x) { return (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174; };
  uint32_t cp = static_cast<uint32_t>(b);
  if (!printable(b)) {
    cp = 256;
    for (int x = 0; x < b; ++x) cp += !printable(x);
  }
  std::string s;
  utf8_append(s, cp);
  return s;
}

Vocab bpe_vocab(const char* pre) {
  Vocab v;
  v.kind = Vocab::Kind::kBpe;
  v.pre = pre;
  v.add_space_prefix = false;
  v.tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool>"};
  v.types = {kTokenControl, kTokenControl, kTokenControl, kTokenUserDefined};
  for (int b = 0; b < 256; ++b) v.tokens.push_back(byte_char(b)), v.types.push_back(kTokenNormal);
  const char* merges[][2] = {{"t", "h"},
                             {"th", "e"},
                             {"\xC4\xA0", "the"},
                             {"i", "n"},
                             {"\xC4\xA0", "a"},
                             {"e", "r"},
                             {"o", "n"},
                             {"\xC4\xA0", "\xC4\xA0"},
                             {"\xC4\xA0\xC4\xA0", "\xC4\xA0\xC4\xA0"},
                             {"1", "2"},
                             {"12", "3"},
                             {"\xC3\x83", "\xC2\xA9"},
                             {"'", "s"},
                             {"\xC4\x8A", "\xC4\x8A"}};
  for (auto& m : merges) {
    v.merges.push_back(std::string(m[0]) + " " + m[1]);
    v.tokens.push_back(std::string(m[0]) + m[1]);
    v.types.push_back(kTokenNormal);
  }
  v.eos_id = 2;
  return v;
}

Vocab spm_vocab() {
  Vocab v;
  v.kind = Vocab::Kind::kSpm;
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.types = {kTokenUnknown, kTokenControl, kTokenControl};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    v.tokens.push_back(buf);
    v.types.push_back(kTokenByte);
  }
  const char* pieces[] = {"\xE2\x96\x81",
                          "a",
                          "b",
                          "c",
                          "e",
                          "h",
                          "t",
                          "\xE2\x96\x81t",
                          "th",
                          "\xE2\x96\x81th",
                          "the",
                          "\xE2\x96\x81the",
                          "ab",
                          "abc",
                          "\u2581a",
                          "\xC3\xA9",
                          "\xE6\x97\xA5"};
  float score = 0;
  for (const char* p : pieces) {
    v.tokens.push_back(p);
    v.types.push_back(kTokenNormal);
    v.scores.push_back(0);
  }
  v.scores.assign(v.tokens.size(), 0.0f);
  for (size_t i = 259; i < v.tokens.size(); ++i) v.scores[i] = score -= 1.0f;
  v.unk_id = 0, v.bos_id = 1, v.eos_id = 2;
  v.add_bos = true;
  v.add_space_prefix = true;
  return v;
}

struct Fixture {
  std::vector<Tokenizer> bpe;  // gpt2, smollm, llama-bpe, qwen2, [the model's]
  std::unique_ptr<Tokenizer> spm;
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture x;
    for (const char* pre : {"gpt2", "smollm", "llama-bpe", "qwen2"}) {
      auto t = Tokenizer::create(bpe_vocab(pre));
      if (!t.is_ok()) std::fprintf(stderr, "%s\n", t.status().message().c_str());
      check(t.is_ok(), "fixed BPE vocabulary builds");
      x.bpe.push_back(std::move(t).value());
    }
    if (const char* path = std::getenv("AGENTKV_MODEL")) {
      auto file = GgufFile::open(path);
      check(file.is_ok(), "AGENTKV_MODEL opens");
      auto v = vocab_from_gguf(*file, 0);
      check(v.is_ok(), "AGENTKV_MODEL has a vocabulary");
      auto t = Tokenizer::create(std::move(v).value());
      check(t.is_ok(), "AGENTKV_MODEL tokenizer builds");
      if (t->vocab().kind == Vocab::Kind::kBpe) x.bpe.push_back(std::move(t).value());
    }
    auto s = Tokenizer::create(spm_vocab());
    check(s.is_ok(), "fixed SPM vocabulary builds");
    x.spm = std::make_unique<Tokenizer>(std::move(s).value());
    return x;
  }();
  return f;
}

std::string stream(const Tokenizer& t, const std::vector<int32_t>& ids) {
  StreamDecoder d(t);
  std::string out;
  for (int32_t id : ids) out += d.push(id);
  out += d.flush();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Fixture& fx = fixture();
  const uint8_t sel = data[0];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const bool parse_special = sel & 0x40;
  const bool valid = utf8_is_valid(text);

  for (PreTokenizerKind k : {PreTokenizerKind::kGpt2, PreTokenizerKind::kSmollm, PreTokenizerKind::kLlama3,
                             PreTokenizerKind::kQwen2}) {
    std::string joined;
    for (auto p : pretokenize(k, text)) {
      check(!p.empty(), "no empty pre-token");
      joined += p;
    }
    check(joined == text, "pre-tokens concatenate to the input");
  }

  if ((sel & 0x80) == 0) {
    const Tokenizer& t = fx.bpe[sel % fx.bpe.size()];
    const auto ids = t.encode(text, (sel & 0x20) != 0, parse_special);
    for (int32_t id : ids) check(id >= 0 && id < t.n_vocab(), "ids inside the vocabulary");
    // Lossless except for bytes the vocabulary has no token for (dropped).
    std::string representable;
    for (char c : text) {
      if (t.find_token(byte_char(static_cast<uint8_t>(c)))) representable += c;
    }
    const std::string decoded = t.decode(ids);
    check(decoded == representable, "BPE decode(encode(s)) == s");
    const std::string streamed = stream(t, ids);
    check(utf8_is_valid(streamed), "stream output is valid UTF-8");
    bool has_control = false;
    for (int32_t id : ids) has_control |= t.is_control(id);
    if (utf8_is_valid(decoded) && !has_control)
      check(streamed == decoded, "stream == decode for valid UTF-8");
  } else {
    const Tokenizer& t = *fx.spm;
    const auto ids = t.encode(text, (sel & 0x20) != 0, parse_special);
    for (int32_t id : ids) check(id >= 0 && id < t.n_vocab(), "ids inside the vocabulary");
    const bool plain = valid && !parse_special && (text.empty() || text[0] != ' ') &&
                       text.find("\xE2\x96\x81") == std::string::npos;
    if (plain) check(t.decode(ids, true) == text, "SPM decode(encode(s)) == s");
    check(utf8_is_valid(stream(t, ids)), "stream output is valid UTF-8");
  }

  (void)chat_template_detect(text);
  const std::vector<ChatMessage> msgs = {{"system", text}, {"user", text}, {"assistant", text}};
  const auto kind = static_cast<ChatTemplateKind>(sel % 3);
  // Every template keeps each message's content; llama3's trims it first, as
  // its Jinja does (`message['content'] | trim`), so whitespace-only text may
  // shrink to nothing there.
  std::string_view content = text;
  if (kind == ChatTemplateKind::kLlama3) {
    constexpr std::string_view kWs = " \t\n\r\f\v";
    const size_t b = content.find_first_not_of(kWs);
    content = b == std::string_view::npos ? std::string_view{}
                                          : content.substr(b, content.find_last_not_of(kWs) - b + 1);
  }
  check(chat_template_apply(kind, msgs, true).find(content) != std::string::npos, "chat text holds the content");
  return 0;
}
