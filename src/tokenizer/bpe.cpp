// Byte-level BPE (GPT-2 family): pre-tokenize, map bytes to printable code
// points, then apply merges lowest rank first, leftmost first on ties, as HF
// tokenizers' BPE model does.
#include <queue>

#include "tokenizer/tokenizer_impl.h"

namespace agentkv {

namespace {

struct Sym {
  int32_t id;
  int32_t prev, next;  // -1 at the ends
};

struct Candidate {
  int32_t rank;
  int32_t left, right;  // symbol indices
  int32_t result;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
};

}  // namespace

void TokenizerImpl::bpe_encode(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    std::string mapped;
    for (unsigned char b : word) mapped += byte_char[b];
    if (auto it = token_ids.find(mapped); it != token_ids.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<Sym> sym(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    sym[i] = {byte_token[static_cast<unsigned char>(word[i])], static_cast<int32_t>(i) - 1,
              i + 1 < word.size() ? static_cast<int32_t>(i + 1) : -1};
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0 || sym[l].id < 0 || sym[r].id < 0) return;
    auto it = merges.find(merge_key(sym[l].id, sym[r].id));
    if (it != merges.end()) heap.push({it->second.rank, l, r, it->second.result});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) consider(i, i + 1);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    // Stale if either side merged since: the pair must still be adjacent and
    // still be the pair that produces this result.
    if (sym[c.left].next != c.right || sym[c.left].id < 0) continue;
    auto it = merges.find(merge_key(sym[c.left].id, sym[c.right].id));
    if (it == merges.end() || it->second.result != c.result || it->second.rank != c.rank) continue;
    sym[c.left].id = c.result;
    sym[c.left].next = sym[c.right].next;
    if (sym[c.right].next >= 0) sym[sym[c.right].next].prev = c.left;
    sym[c.right].prev = sym[c.right].next = -2;  // dead
    consider(sym[c.left].prev, c.left);
    consider(c.left, sym[c.left].next);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    // A byte with no token (vocabularies often lack C0, C1, F5..FF and some
    // control bytes) is dropped, as HF's BPE does without an unk token; the
    // GGUF unk id of byte-level vocabularies is typically <|endoftext|>,
    // which must not appear in the middle of a prompt.
    if (sym[i].id >= 0) out.push_back(sym[i].id);
  }
}

}  // namespace agentkv
