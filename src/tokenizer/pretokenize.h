// Pre-tokenizers of byte-level BPE vocabularies: the regex a model family
// splits text with before BPE, implemented by hand over code points (the
// regexes only need \p{L}, \p{N}, \s, a few literals and one lookahead).
#pragma once

#include <string_view>
#include <vector>

#include "util/status.h"

namespace agentkv {

enum class PreTokenizerKind {
  // GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // SmolLM / StarCoder: every \p{N} code point is its own piece, then GPT-2 (HF: Digits(individual) +
  // ByteLevel).
  kSmollm,
  // Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
  //          \s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // Qwen2: the Llama 3 regex with single digits (\p{N} instead of \p{N}{1,3}).
  kQwen2,
};

// Maps tokenizer.ggml.pre to a kind; families that share a regex share a kind.
Result<PreTokenizerKind> pre_tokenizer_from_name(std::string_view pre);

// Splits text into pieces that concatenate back to text. Bytes that are not
// valid UTF-8 are treated as one "other" character each.
std::vector<std::string_view> pretokenize(PreTokenizerKind kind, std::string_view text);

}  // namespace agentkv
