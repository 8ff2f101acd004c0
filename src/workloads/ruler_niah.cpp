#include <algorithm>
#include <random>

#include "workloads/ruler_tasks.h"
#include "workloads/task_text.h"
#include "workloads/task_words.h"

namespace agentkv {

namespace {

// "apple", "apple and river", "apple, river and stone".
std::string join_and(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += i + 1 == v.size() ? " and " : ", ";
    s += v[i];
  }
  return s;
}

}  // namespace

Result<std::vector<FidelityTask>> make_mq_niah_tasks(const Tokenizer& tok, const FidelityTaskOptions& o) {
  if (o.needles < 1 || o.needles > static_cast<int32_t>(task_nouns().size()) || o.queries < 1 ||
      o.queries > o.needles) {
    return make_error(ErrorCode::kInvalidArgument,
                      "mq-niah: need 1 <= queries <= needles <= ", task_nouns().size());
  }
  std::mt19937_64 rng(o.seed);
  std::vector<FidelityTask> tasks;
  for (int32_t i = 0; i < o.n_prompts; ++i) {
    FidelityTask t;
    t.kind = "mq-niah";
    t.head =
        task_chat_head(tok,
                       "Some special magic numbers are hidden within the following documents. Make sure to "
                       "memorize them. I will quiz you about the numbers afterwards.");
    t.cache_head = task_cache_head(tok);
    const std::vector<std::string> keys = task_pick_nouns(rng, static_cast<size_t>(o.needles));
    std::vector<std::string> values;
    for (int32_t k = 0; k < o.needles; ++k)
      values.push_back(std::to_string(task_uniform(rng, 1000000, 9999999)));
    // Needle k goes to document (k + offset) % n_docs: spread evenly, and
    // which document gets the first needle varies.
    const int64_t offset = task_uniform(rng, 0, o.n_docs - 1);
    for (int32_t d = 0; d < o.n_docs; ++d) {
      std::vector<std::string> inserts;
      for (int32_t k = 0; k < o.needles; ++k) {
        if ((k + offset) % o.n_docs == d) {
          inserts.push_back(" The special magic number for " + keys[k] + " is " + values[k] + ".");
        }
      }
      t.docs.push_back(task_document(tok, rng, d, o.doc_tokens, inserts));
    }
    std::vector<int32_t> asked = task_shuffled_order(o.needles, rng);
    asked.resize(static_cast<size_t>(o.queries));
    std::vector<std::string> asked_keys;
    for (int32_t k : asked) asked_keys.push_back(keys[k]), t.answers.push_back(values[k]);
    const std::string q = join_and(asked_keys);
    const bool one = o.queries == 1;
    t.tail = task_chat_tail(
        tok, rng,
        std::string(one ? "What is the special magic number for "
                        : "What are the special magic numbers for ") +
            q + " mentioned in the provided documents?",
        std::string(one ? "The special magic number for " : "The special magic numbers for ") + q +
            (one ? " mentioned in the provided documents is" : " mentioned in the provided documents are"),
        o.question_tokens);
    t.cache_order = task_shuffled_order(o.n_docs, rng);
    tasks.push_back(std::move(t));
  }
  return tasks;
}

}  // namespace agentkv
