#include <algorithm>
#include <random>

#include "workloads/ruler_tasks.h"
#include "workloads/task_text.h"
#include "workloads/task_words.h"

namespace agentkv {

namespace {

// Tokens a document may hold beyond its even share when pieces are split
// whole (task_split_pieces): more than one entry "\n123. squirrel" takes.
constexpr int32_t kPieceSlack = 16;

// "\n<n>." (built by appending: g++ 12 warns falsely on "\n" + std::string).
std::string entry_number(size_t n) {
  std::string s = "\n";
  s += std::to_string(n);
  s += '.';
  return s;
}

}  // namespace

Result<std::vector<FidelityTask>> make_cwe_tasks(const Tokenizer& tok, const FidelityTaskOptions& o) {
  const int32_t n_words = static_cast<int32_t>(task_nouns().size());
  if (o.answer_words < 1 || o.answer_words >= n_words || o.rare_freq < 1 || o.common_freq <= o.rare_freq) {
    return make_error(ErrorCode::kInvalidArgument, "cwe: need 1 <= answer_words < ", n_words,
                      " and common_freq > rare_freq >= 1");
  }
  const int64_t budget = int64_t{o.n_docs} * (o.doc_tokens - kPieceSlack);
  std::mt19937_64 rng(o.seed);
  std::vector<FidelityTask> tasks;
  for (int32_t i = 0; i < o.n_prompts; ++i) {
    FidelityTask t;
    t.kind = "cwe";
    t.head = task_chat_head(
        tok,
        "Below is a numbered list of words. In these words, some appear more often than others. "
        "Memorize the ones that appear most often.");
    t.cache_head = task_cache_head(tok);
    const std::vector<std::string> nouns = task_pick_nouns(rng, static_cast<size_t>(n_words));
    // Entry n is "\n<n>." then " <word>", each tokenized alone, so the
    // list's token count does not depend on which word has which number.
    std::vector<std::vector<int32_t>> word_ids;
    for (const std::string& w : nouns) word_ids.push_back(tok.encode(" " + w, false, false));
    std::vector<int32_t> list;  // noun indices, one per entry
    int64_t tokens = 0;
    auto add = [&](int32_t w, int32_t times) {
      int64_t more = 0;
      for (int32_t r = 0; r < times; ++r) {
        more += static_cast<int64_t>(word_ids[w].size() +
                                     tok.encode(entry_number(list.size() + r + 1), false, false).size());
      }
      if (tokens + more > budget) return false;
      tokens += more;
      list.insert(list.end(), static_cast<size_t>(times), w);
      return true;
    };
    for (int32_t w = 0; w < o.answer_words; ++w) {
      if (!add(w, o.common_freq)) {
        return make_error(ErrorCode::kInvalidArgument, "cwe: ", o.answer_words, " words x ", o.common_freq,
                          " do not fit in ", o.n_docs, " documents of ", o.doc_tokens, " tokens");
      }
    }
    for (int32_t w = o.answer_words; w < n_words && add(w, o.rare_freq);) ++w;
    std::shuffle(list.begin(), list.end(), rng);
    std::vector<std::vector<int32_t>> pieces;
    for (size_t e = 0; e < list.size(); ++e) {
      pieces.push_back(tok.encode(entry_number(e + 1), false, false));
      pieces.back().insert(pieces.back().end(), word_ids[list[e]].begin(), word_ids[list[e]].end());
    }
    t.docs = task_split_pieces(pieces, o.n_docs);
    for (int32_t w = 0; w < o.answer_words; ++w) t.answers.push_back(nouns[w]);
    const std::string k = std::to_string(o.answer_words);
    t.tail = task_chat_tail(
        tok, rng, "Question: What are the " + k + " most common words in the above list?",
        "Answer: The top " + k + " words that appear most often in the list are:", o.question_tokens);
    t.cache_order = task_shuffled_order(o.n_docs, rng);
    tasks.push_back(std::move(t));
  }
  return tasks;
}

}  // namespace agentkv
