#include "workloads/task_text.h"

#include <algorithm>

namespace agentkv {

namespace {

// Sentences of the passkey-retrieval filler family, varied so that documents
// differ (identical documents would make segment reuse trivial).
constexpr const char* kSubjects[] = {"The grass",    "The sky",     "The old river", "A small bird",
                                     "The city",     "The morning", "A quiet road",  "The garden",
                                     "The mountain", "The sea"};
constexpr const char* kVerbs[] = {"is", "looks", "seems", "stays", "feels"};
constexpr const char* kAdjectives[] = {"green", "blue", "calm", "bright", "warm",
                                       "still", "wide", "cold", "gold",   "soft"};
constexpr const char* kTails[] = {
    " today.",          " again.",       " in the evening.",       " as always.",
    " near the hills.", ". Here we go.", ". There and back again."};

}  // namespace

std::string task_filler_sentence(std::mt19937_64& rng) {
  auto pick = [&](const auto& arr) { return std::string(arr[rng() % std::size(arr)]); };
  // The draws are unsequenced in this expression; g++ draws them as when
  // the passkey prompts were first generated, so a seed keeps its prompts
  // (pinned by PasskeyPromptsAreThoseOfBeforeTheTaskKinds). std::string(" ")
  // rather than " ": g++ 12 warns falsely (-Wrestrict) on the latter.
  return std::string(" ") + pick(kSubjects) + " " + pick(kVerbs) + " " + pick(kAdjectives) + pick(kTails);
}

std::vector<int32_t> task_filler_with(const Tokenizer& tok, std::mt19937_64& rng, int32_t n,
                                      const std::vector<std::string>& inserts) {
  std::vector<std::vector<int32_t>> ins;
  int32_t ins_tokens = 0;
  for (const std::string& s : inserts) {
    ins.push_back(tok.encode(s, false, false));
    ins_tokens += static_cast<int32_t>(ins.back().size());
  }
  const int32_t budget = std::max<int32_t>(n - ins_tokens, 0);
  std::vector<std::vector<int32_t>> sentences;
  for (int32_t have = 0; have < budget;) {
    sentences.push_back(tok.encode(task_filler_sentence(rng), false, false));
    have += static_cast<int32_t>(sentences.back().size());
    if (have > budget) sentences.back().resize(sentences.back().size() - static_cast<size_t>(have - budget));
  }
  // An insert goes before sentence `at` (0..count of whole sentences), never
  // after the cut one, so it reads as a sentence of its own.
  const int64_t whole = sentences.empty() ? 0 : static_cast<int64_t>(sentences.size()) - 1;
  std::vector<int64_t> at(ins.size());
  for (int64_t& a : at) a = task_uniform(rng, 0, whole);
  std::sort(at.begin(), at.end());
  std::vector<int32_t> out;
  size_t k = 0;
  for (size_t s = 0; s <= sentences.size(); ++s) {
    for (; k < ins.size() && at[k] == static_cast<int64_t>(s); ++k)
      out.insert(out.end(), ins[k].begin(), ins[k].end());
    if (s < sentences.size()) out.insert(out.end(), sentences[s].begin(), sentences[s].end());
  }
  return out;
}

std::vector<int32_t> task_document(const Tokenizer& tok, std::mt19937_64& rng, int32_t index,
                                   int32_t doc_tokens, const std::vector<std::string>& inserts) {
  std::vector<int32_t> doc = tok.encode("\nDocument " + std::to_string(index + 1) + ":", false, false);
  const auto body = task_filler_with(tok, rng, doc_tokens - static_cast<int32_t>(doc.size()), inserts);
  doc.insert(doc.end(), body.begin(), body.end());
  return doc;
}

std::vector<int32_t> task_chat_head(const Tokenizer& tok, const std::string& instruction) {
  return tok.encode("<|im_start|>user\n" + instruction + "\n", false, true);
}

std::vector<int32_t> task_cache_head(const Tokenizer& tok) {
  return tok.encode("<|im_start|>system\nArchived document follows.<|im_end|>\n", false, true);
}

std::vector<int32_t> task_chat_tail(const Tokenizer& tok, std::mt19937_64& rng, const std::string& question,
                                    const std::string& answer_prefix, int32_t question_tokens) {
  const auto q =
      tok.encode("\n" + question + "<|im_end|>\n<|im_start|>assistant\n" + answer_prefix, false, true);
  std::vector<int32_t> tail;
  if (question_tokens > static_cast<int32_t>(q.size())) {
    tail = task_filler_with(tok, rng, question_tokens - static_cast<int32_t>(q.size()), {});
  }
  tail.insert(tail.end(), q.begin(), q.end());
  return tail;
}

std::vector<int32_t> task_shuffled_order(int32_t n, std::mt19937_64& rng) {
  std::vector<int32_t> order(static_cast<size_t>(std::max(n, 0)));
  for (int32_t d = 0; d < n; ++d) order[d] = d;
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

std::vector<std::vector<int32_t>> task_split_pieces(const std::vector<std::vector<int32_t>>& pieces,
                                                    int32_t n) {
  std::vector<std::vector<int32_t>> docs(static_cast<size_t>(std::max(n, 1)));
  int64_t total = 0;
  for (const auto& p : pieces) total += static_cast<int64_t>(p.size());
  int64_t start = 0;
  for (const auto& p : pieces) {
    const int64_t d = total > 0 ? start * static_cast<int64_t>(docs.size()) / total : 0;
    docs[static_cast<size_t>(d)].insert(docs[static_cast<size_t>(d)].end(), p.begin(), p.end());
    start += static_cast<int64_t>(p.size());
  }
  return docs;
}

int64_t task_uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
}

}  // namespace agentkv
