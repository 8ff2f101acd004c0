// Internal state of a Tokenizer, shared by the BPE and SPM encoders.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace agentkv {

// Heterogeneous lookup so string_views find std::string keys without copies.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct MergeInfo {
  int32_t rank;    // position in the merges list: lower merges first
  int32_t result;  // id of the merged token
};

struct TokenizerImpl {
  Vocab vocab;
  TokenMap token_ids;               // text -> id (the first id when a text repeats)
  std::vector<std::string> pieces;  // raw bytes of each token, as decode emits them
  std::vector<uint8_t> is_control;  // CONTROL / UNKNOWN: skipped by decode(skip_special)
  std::vector<uint8_t> is_eog;

  // Special tokens split out before BPE, bucketed by first byte, longest first.
  struct Special {
    int32_t id;
    bool always;  // user-defined: recognised even without parse_special
  };
  std::array<std::vector<Special>, 256> specials;

  // Byte-level BPE.
  PreTokenizerKind pre = PreTokenizerKind::kGpt2;
  bool ignore_merges = false;              // Llama 3: a pre-token that is a whole token is not merged
  std::array<int32_t, 256> byte_token{};   // BPE: the byte's mapped char; SPM: <0xXX>; -1 if absent
  std::array<std::string, 256> byte_char;  // BPE: the byte's mapped char as UTF-8
  std::unordered_map<uint64_t, MergeInfo> merges;

  // SentencePiece: tokens eligible as merge results (normal and user-defined).
  TokenMap spm_pieces;

  void bpe_encode(std::string_view text, std::vector<int32_t>& out) const;
  void spm_encode(std::string_view text, bool space_prefix, std::vector<int32_t>& out) const;
};

inline uint64_t merge_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace agentkv
