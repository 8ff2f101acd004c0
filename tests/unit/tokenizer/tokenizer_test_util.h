// Helpers for the tokenizer tests: fixture paths and small vocabularies.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

#include "source_dir.h"

namespace agentkv::test {

inline std::string model_path() { return source_dir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf"; }
inline bool file_exists(const std::string& path) { return std::ifstream(path).good(); }

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline const nlohmann::json& expected_json() {
  static const nlohmann::json j =
      nlohmann::json::parse(read_text(source_dir() + "/tests/data/tokenizer/expected_smollm.json"));
  return j;
}

inline std::vector<std::string> corpus() {
  return nlohmann::json::parse(read_text(source_dir() + "/tests/data/tokenizer/corpus.json"))["strings"]
      .get<std::vector<std::string>>();
}

// GPT-2 byte -> printable code point, written out independently of the
// tokenizer (the tests build byte-level vocabularies with it).
inline std::string byte_char(uint8_t b) {
  uint32_t cp = b;
  if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) {
    uint32_t n = 0;
    for (uint32_t x = 0; x < b; ++x)
      if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174)) ++n;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// A tiny byte-level BPE vocabulary: the 256 byte chars, a few merges, and
// ChatML control tokens.
inline Vocab tiny_bpe_vocab() {
  Vocab v;
  v.kind = Vocab::Kind::kBpe;
  v.pre = "gpt2";
  v.add_space_prefix = false;
  v.tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  for (int b = 0; b < 256; ++b) v.tokens.push_back(byte_char(static_cast<uint8_t>(b)));
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"},          {"he", "ll"},          {"hell", "o"}, {"\xC4\xA0", "w"},
      {"o", "r"}, {"\xC4\xA0w", "or"}, {"\xC4\xA0wor", "ld"}, {"l", "d"}};
  for (const auto& [a, b] : merges) {
    v.merges.push_back(a + " " + b);
    bool have = false;
    for (const auto& t : v.tokens) have |= t == a + b;
    if (!have) v.tokens.push_back(a + b);
  }
  v.types.assign(v.tokens.size(), kTokenNormal);
  v.types[0] = v.types[1] = v.types[2] = kTokenControl;
  v.bos_id = 0;
  v.eos_id = 2;
  return v;
}

inline GgufWriter vocab_writer(const Vocab& v) {
  GgufWriter w;
  w.add_string("tokenizer.ggml.model", v.kind == Vocab::Kind::kBpe ? "gpt2" : "llama");
  w.add_string("tokenizer.ggml.pre", v.pre);
  w.add_string_array("tokenizer.ggml.tokens", v.tokens);
  w.add_int32_array("tokenizer.ggml.token_type", v.types);
  if (!v.scores.empty()) w.add_float32_array("tokenizer.ggml.scores", v.scores);
  if (v.kind == Vocab::Kind::kBpe) w.add_string_array("tokenizer.ggml.merges", v.merges);
  if (v.bos_id >= 0) w.add_uint32("tokenizer.ggml.bos_token_id", v.bos_id);
  if (v.eos_id >= 0) w.add_uint32("tokenizer.ggml.eos_token_id", v.eos_id);
  if (v.unk_id >= 0) w.add_uint32("tokenizer.ggml.unknown_token_id", v.unk_id);
  w.add_bool("tokenizer.ggml.add_bos_token", v.add_bos);
  w.add_bool("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
  return w;
}

}  // namespace agentkv::test
