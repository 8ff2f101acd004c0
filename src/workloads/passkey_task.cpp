#include "workloads/passkey_task.h"

#include <algorithm>
#include <random>

#include "workloads/task_text.h"

namespace agentkv {

namespace {

// Filler sentences tokenized one by one until `n` tokens; `insert` (if not
// empty) goes in after a random number (0-3) of sentences. Cut to exactly n.
std::vector<int32_t> filler(const Tokenizer& tok, std::mt19937_64& rng, int32_t n,
                            const std::string& insert) {
  std::vector<int32_t> out;
  const size_t at_sentence = insert.empty() ? SIZE_MAX : rng() % 4;
  for (size_t s = 0; static_cast<int32_t>(out.size()) < n; ++s) {
    const std::string text = s == at_sentence ? insert : task_filler_sentence(rng);
    const auto ids = tok.encode(text, false, false);
    out.insert(out.end(), ids.begin(), ids.end());
  }
  out.resize(n);
  return out;
}

}  // namespace

std::vector<FidelityTask> make_passkey_tasks(const Tokenizer& tok, const FidelityTaskOptions& o) {
  std::mt19937_64 rng(o.seed);
  std::vector<FidelityTask> tasks;
  for (int32_t i = 0; i < o.n_prompts; ++i) {
    FidelityTask t;
    t.kind = "passkey";
    t.head = task_chat_head(tok, "Read the documents, then answer.");
    t.cache_head = task_cache_head(tok);
    const int32_t answer_doc = i % std::max(o.n_docs, 1);
    const std::string passkey = std::to_string(10000 + rng() % 90000);
    t.answers = {passkey};
    const std::string key = " The pass key is " + passkey + ". Remember it. " + passkey + " is the pass key.";
    for (int32_t d = 0; d < o.n_docs; ++d) {
      std::vector<int32_t> doc = tok.encode("\nDocument " + std::to_string(d + 1) + ":", false, false);
      // The key sentence must survive the cut: it goes in early (first 4 sentences).
      const auto body =
          filler(tok, rng, std::max<int32_t>(o.doc_tokens - static_cast<int32_t>(doc.size()), 1),
                 d == answer_doc ? key : "");
      doc.insert(doc.end(), body.begin(), body.end());
      t.docs.push_back(std::move(doc));
    }
    t.tail = task_chat_tail(tok, rng, "What is the pass key?", "The pass key is", o.question_tokens);
    t.cache_order = task_shuffled_order(o.n_docs, rng);
    tasks.push_back(std::move(t));
  }
  return tasks;
}

}  // namespace agentkv
