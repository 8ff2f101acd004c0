// Tokenizers read from a GGUF model file: byte-level BPE ("gpt2": SmolLM2,
// Llama 3, Qwen2, GPT-2) and SentencePiece BPE ("llama": Llama 2, Mistral v1).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/gguf.h"
#include "tokenizer/marked_text.h"
#include "util/status.h"

namespace agentkv {

// llama.cpp token types (tokenizer.ggml.token_type).
enum TokenType : int32_t {
  kTokenUndefined = 0,
  kTokenNormal = 1,
  kTokenUnknown = 2,
  kTokenControl = 3,
  kTokenUserDefined = 4,
  kTokenUnused = 5,
  kTokenByte = 6,
};

// Filled from the tokenizer.ggml.* keys of a GGUF file.
struct Vocab {
  enum class Kind {
    kBpe,  // "gpt2": byte-level BPE, merges by rank
    kSpm,  // "llama": SentencePiece BPE, merges by score, byte fallback <0xXX>
  };
  Kind kind = Kind::kBpe;
  std::string pre = "default";  // tokenizer.ggml.pre: "smollm", "llama-bpe", "qwen2", "gpt2", "default", ...
  std::vector<std::string> tokens;
  std::vector<float> scores;        // SPM merge priority (higher merges first); may be empty for BPE
  std::vector<int32_t> types;       // TokenType per token; empty means all normal
  std::vector<std::string> merges;  // BPE: "left right", best first
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1, eot_id = -1;
  bool add_bos = false, add_eos = false;
  // Prepend a space to the text (SentencePiece). Only the SPM tokenizer uses it.
  bool add_space_prefix = true;
  std::string chat_template;  // tokenizer.chat_template, may be empty
};

// Errors if keys are missing or mistyped, arrays disagree in length, special
// ids are out of range, or the vocabulary is smaller than n_vocab_required
// (the model's embedding rows; <= 0 skips that check).
Result<Vocab> vocab_from_gguf(const GgufFile& f, int64_t n_vocab_required);

struct TokenizerImpl;

class Tokenizer {
 public:
  // Builds merge ranks, byte maps and the special-token matcher.
  static Result<Tokenizer> create(Vocab vocab);

  // add_special: prepend BOS / append EOS as the vocab says. parse_special:
  // recognise control tokens such as <|im_start|> in the text (true for
  // chat-formatted prompts); false encodes them as plain text. User-defined
  // tokens are always recognised.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;
  // encode(text, add_special, /*parse_special=*/true), except that a control
  // token is recognised only where its text lies wholly outside input_spans
  // (sorted, disjoint): text a request supplied stays plain text, while the
  // text between, tokenized as one string, gives the same tokens encode does.
  std::vector<int32_t> encode_marked(std::string_view text, std::span<const TextSpan> input_spans,
                                     bool add_special) const;
  // Concatenated bytes of the tokens (control tokens as their text unless
  // skip_special). Out-of-range ids decode to nothing.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // Raw bytes of one token (may be a partial UTF-8 sequence).
  std::string token_to_piece(int32_t id) const;

  int32_t n_vocab() const;
  const Vocab& vocab() const;
  // End of generation: eos, eot and end-of-turn tokens such as <|im_end|>.
  bool is_eog(int32_t id) const;
  bool is_control(int32_t id) const;
  std::optional<int32_t> find_token(std::string_view text) const;

 private:
  explicit Tokenizer(std::shared_ptr<const TokenizerImpl> impl) : impl_(std::move(impl)) {}
  // parse_special, except within no_special.
  std::vector<int32_t> encode_spans(std::string_view text, bool add_special, bool parse_special,
                                    std::span<const TextSpan> no_special) const;
  std::shared_ptr<const TokenizerImpl> impl_;  // immutable, so copies share it
};

// Incremental detokenizer for streaming: feed ids, get only complete UTF-8
// text so far; bytes that can never form a character come out as U+FFFD.
// Control tokens are skipped. Keeps a reference to the tokenizer.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok) : tok_(&tok) {}
  std::string push(int32_t id);
  // Whatever is pending (an unfinished sequence becomes U+FFFD).
  std::string flush();

 private:
  const Tokenizer* tok_;
  std::string pending_;
  bool first_text_ = true;
};

}  // namespace agentkv
