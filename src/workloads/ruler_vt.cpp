#include <algorithm>
#include <random>

#include "workloads/ruler_tasks.h"
#include "workloads/task_text.h"
#include "workloads/task_words.h"

namespace agentkv {

Result<std::vector<FidelityTask>> make_vt_tasks(const Tokenizer& tok, const FidelityTaskOptions& o) {
  if (o.chains < 1 || o.hops < 0 || o.chains * (o.hops + 1) > 1000) {
    return make_error(ErrorCode::kInvalidArgument,
                      "vt: need chains >= 1, hops >= 0 and at most 1000 variables");
  }
  std::mt19937_64 rng(o.seed);
  std::vector<FidelityTask> tasks;
  const int32_t per_chain = o.hops + 1;
  for (int32_t i = 0; i < o.n_prompts; ++i) {
    FidelityTask t;
    t.kind = "vt";
    t.head = task_chat_head(
        tok, "Memorize and track the chain(s) of variable assignment hidden in the following documents.");
    t.cache_head = task_cache_head(tok);
    const std::vector<std::string> names =
        task_variable_names(rng, static_cast<size_t>(o.chains * per_chain), 5);
    std::vector<std::string> values;  // distinct per chain
    while (static_cast<int32_t>(values.size()) < o.chains) {
      const std::string v = std::to_string(task_uniform(rng, 10000, 99999));
      if (std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
    }
    // Each chain's assignments go in order over the documents: sorted random
    // documents, so a chain may cross document boundaries (that is where
    // segment reuse can lose it).
    std::vector<std::vector<std::string>> doc_inserts(static_cast<size_t>(o.n_docs));
    for (int32_t c = 0; c < o.chains; ++c) {
      std::vector<int64_t> doc_of(static_cast<size_t>(per_chain));
      for (int64_t& d : doc_of) d = task_uniform(rng, 0, o.n_docs - 1);
      std::sort(doc_of.begin(), doc_of.end());
      for (int32_t h = 0; h < per_chain; ++h) {
        const std::string& var = names[c * per_chain + h];
        const std::string rhs = h == 0 ? values[c] : "VAR " + names[c * per_chain + h - 1];
        doc_inserts[doc_of[h]].push_back(" VAR " + var + " = " + rhs + ".");
      }
    }
    for (int32_t d = 0; d < o.n_docs; ++d) {
      t.docs.push_back(task_document(tok, rng, d, o.doc_tokens, doc_inserts[d]));
    }
    for (int32_t h = 0; h < per_chain; ++h) t.answers.push_back(names[h]);
    t.tail = task_chat_tail(
        tok, rng,
        "Question: Find all variables that are assigned the value " + values[0] + " in the documents above.",
        "Answer: According to the chain(s) of variable assignment in the documents above, " +
            std::to_string(per_chain) + " variables are assigned the value " + values[0] + ", they are: VAR",
        o.question_tokens);
    t.cache_order = task_shuffled_order(o.n_docs, rng);
    tasks.push_back(std::move(t));
  }
  return tasks;
}

}  // namespace agentkv
