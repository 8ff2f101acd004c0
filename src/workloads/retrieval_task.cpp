#include "workloads/retrieval_task.h"

#include <algorithm>
#include <iterator>
#include <random>

#include "workloads/task_text.h"

namespace agentkv {

namespace {

constexpr const char* kNames[] = {"Anna",  "Boris", "Chen", "Dara",  "Emil",  "Fatima", "Gus",  "Hana",
                                  "Ivan",  "Julia", "Kofi", "Lena",  "Marco", "Nadia",  "Omar", "Priya",
                                  "Quinn", "Rosa",  "Sven", "Tariq", "Uma",   "Viktor", "Wen",  "Yusuf"};
constexpr const char* kAttributes[] = {"phone number", "room number",   "house number", "secret number",
                                       "badge number", "flight number", "seat number",  "account number"};

}  // namespace

std::vector<FidelityTask> make_retrieval_tasks(const Tokenizer& tok, const FidelityTaskOptions& o) {
  std::mt19937_64 rng(o.seed);
  std::vector<FidelityTask> tasks;
  for (int32_t i = 0; i < o.n_prompts; ++i) {
    FidelityTask t;
    t.kind = "retrieval";
    t.head = task_chat_head(tok, "Read the documents, then answer.");
    t.cache_head = task_cache_head(tok);
    const std::string name = kNames[rng() % std::size(kNames)];
    const std::string attribute = kAttributes[rng() % std::size(kAttributes)];
    const std::string number = std::to_string(task_uniform(rng, 1000, 9999));
    t.answers = {number};
    const int32_t answer_doc = i % std::max(o.n_docs, 1);
    for (int32_t d = 0; d < o.n_docs; ++d) {
      std::vector<std::string> inserts;
      if (d == answer_doc) inserts.push_back(" " + name + "'s " + attribute + " is " + number + ".");
      t.docs.push_back(task_document(tok, rng, d, o.doc_tokens, inserts));
    }
    t.tail =
        task_chat_tail(tok, rng, "What is " + name + "'s " + attribute + "? Answer with the number only.",
                       "The answer is", o.question_tokens);
    t.cache_order = task_shuffled_order(o.n_docs, rng);
    tasks.push_back(std::move(t));
  }
  return tasks;
}

}  // namespace agentkv
