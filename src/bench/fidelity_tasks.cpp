#include "bench/fidelity_tasks.h"

#include <algorithm>
#include <random>

namespace agentkv {

namespace {

// Sentences of the passkey-retrieval filler family, varied so that documents
// differ (identical documents would make segment reuse trivial).
constexpr const char* kSubjects[] = {"The grass", "The sky", "The old river", "A small bird", "The city",
                                     "The morning", "A quiet road", "The garden", "The mountain", "The sea"};
constexpr const char* kVerbs[] = {"is", "looks", "seems", "stays", "feels"};
constexpr const char* kAdjectives[] = {"green", "blue", "calm", "bright", "warm", "still", "wide", "cold", "gold", "soft"};
constexpr const char* kTails[] = {" today.", " again.", " in the evening.", " as always.", " near the hills.",
                                  ". Here we go.", ". There and back again."};

std::string filler_sentence(std::mt19937_64& rng) {
  auto pick = [&](const auto& arr) { return std::string(arr[rng() % std::size(arr)]); };
  return " " + pick(kSubjects) + " " + pick(kVerbs) + " " + pick(kAdjectives) + pick(kTails);
}

// Filler sentences tokenized one by one until `n` tokens; `insert` (if not
// empty) goes in after a random number of sentences. Cut to exactly n.
std::vector<int32_t> filler(const Tokenizer& tok, std::mt19937_64& rng, int32_t n, const std::string& insert) {
  std::vector<int32_t> out;
  const size_t at_sentence = insert.empty() ? SIZE_MAX : rng() % 4;
  for (size_t s = 0; static_cast<int32_t>(out.size()) < n; ++s) {
    const std::string text = s == at_sentence ? insert : filler_sentence(rng);
    const auto ids = tok.encode(text, false, false);
    out.insert(out.end(), ids.begin(), ids.end());
  }
  out.resize(n);
  return out;
}

}  // namespace

std::vector<int32_t> FidelityTask::prompt() const {
  std::vector<int32_t> p = head;
  for (const auto& d : docs) p.insert(p.end(), d.begin(), d.end());
  p.insert(p.end(), tail.begin(), tail.end());
  return p;
}

std::vector<FidelityTask> make_fidelity_tasks(const Tokenizer& tok, const FidelityTaskOptions& o) {
  std::mt19937_64 rng(o.seed);
  std::vector<FidelityTask> tasks;
  for (int32_t i = 0; i < o.n_prompts; ++i) {
    FidelityTask t;
    t.head = tok.encode("<|im_start|>user\nRead the documents, then answer.\n", false, true);
    t.cache_head = tok.encode("<|im_start|>system\nArchived document follows.<|im_end|>\n", false, true);
    t.answer_doc = i % std::max(o.n_docs, 1);
    t.passkey = std::to_string(10000 + rng() % 90000);
    const std::string key = " The pass key is " + t.passkey + ". Remember it. " + t.passkey + " is the pass key.";
    for (int32_t d = 0; d < o.n_docs; ++d) {
      std::vector<int32_t> doc = tok.encode("\nDocument " + std::to_string(d + 1) + ":", false, false);
      // The key sentence must survive the cut: it goes in early (first 4 sentences).
      const auto body = filler(tok, rng, std::max<int32_t>(o.doc_tokens - static_cast<int32_t>(doc.size()), 1),
                               d == t.answer_doc ? key : "");
      doc.insert(doc.end(), body.begin(), body.end());
      t.docs.push_back(std::move(doc));
    }
    const auto q = tok.encode("\nWhat is the pass key?<|im_end|>\n<|im_start|>assistant\nThe pass key is", false, true);
    if (o.question_tokens > static_cast<int32_t>(q.size())) {
      t.tail = filler(tok, rng, o.question_tokens - static_cast<int32_t>(q.size()), "");
    }
    t.tail.insert(t.tail.end(), q.begin(), q.end());
    t.cache_order.resize(o.n_docs);
    for (int32_t d = 0; d < o.n_docs; ++d) t.cache_order[d] = d;
    std::shuffle(t.cache_order.begin(), t.cache_order.end(), rng);
    tasks.push_back(std::move(t));
  }
  return tasks;
}

}  // namespace agentkv
