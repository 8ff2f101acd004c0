// SentencePiece BPE (llama / mistral v1 vocabularies): spaces become U+2581,
// then adjacent pieces merge highest score first (leftmost on ties) while
// their concatenation is a vocabulary piece; characters with no piece fall
// back to <0xXX> byte tokens.
#include <queue>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace agentkv {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581

struct Sym {
  uint32_t start, len;  // bytes in the escaped text
  int32_t prev, next;
};

struct Candidate {
  float score;
  int32_t left, right;
  uint32_t len;  // bytes of left + right when pushed; changes if either merged since
  bool operator<(const Candidate& o) const { return score != o.score ? score < o.score : left > o.left; }
};

}  // namespace

void TokenizerImpl::spm_encode(std::string_view text, bool space_prefix, std::vector<int32_t>& out) const {
  std::string s;
  s.reserve(text.size() + 8);
  if (space_prefix) s += kSpace;
  for (char c : text) {
    if (c == ' ') {
      s += kSpace;
    } else {
      s += c;
    }
  }
  if (s.empty()) return;

  std::vector<Sym> sym;
  for (size_t i = 0; i < s.size();) {
    const uint32_t len = utf8_decode(s, i).len;
    const int32_t idx = static_cast<int32_t>(sym.size());
    sym.push_back({static_cast<uint32_t>(i), len, idx - 1, i + len < s.size() ? idx + 1 : -1});
    i += len;
  }
  std::priority_queue<Candidate> heap;
  auto consider = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const uint32_t len = sym[l].len + sym[r].len;
    auto it = spm_pieces.find(std::string_view(s).substr(sym[l].start, len));
    if (it == spm_pieces.end()) return;
    heap.push({vocab.scores.empty() ? 0.0f : vocab.scores[it->second], l, r, len});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) consider(i, i + 1);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    if (sym[c.left].next != c.right || sym[c.left].len + sym[c.right].len != c.len) continue;
    sym[c.left].len = c.len;
    sym[c.left].next = sym[c.right].next;
    if (sym[c.right].next >= 0) sym[sym[c.right].next].prev = c.left;
    sym[c.right].prev = sym[c.right].next = -2;
    sym[c.right].len = 0;
    consider(sym[c.left].prev, c.left);
    consider(c.left, sym[c.left].next);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    std::string_view piece = std::string_view(s).substr(sym[i].start, sym[i].len);
    if (auto it = spm_pieces.find(piece); it != spm_pieces.end()) {
      out.push_back(it->second);
      continue;
    }
    for (unsigned char b : piece) {
      if (byte_token[b] >= 0) {
        out.push_back(byte_token[b]);
      } else if (vocab.unk_id >= 0) {
        out.push_back(vocab.unk_id);
      }
    }
  }
}

}  // namespace agentkv
