#include "workloads/chat_task.h"

#include <algorithm>
#include <random>

#include "workloads/task_text.h"
#include "workloads/task_words.h"

namespace agentkv {

namespace {

// People and pets a user may mention. Names are distinct and none is part
// of another, ignoring case (an answer is found by substring match).
constexpr const char* kRelations[] = {"sister", "brother", "neighbour", "dog",    "cat",
                                      "boss",   "teacher", "cousin",    "doctor", "horse"};
constexpr const char* kNames[] = {"Emma",  "Oliver", "Sophie", "Lucas", "Hugo", "Clara", "Felix", "Ruby",
                                  "Oscar", "Nora",   "Jasper", "Greta", "Milo", "Iris",  "Bruno", "Wanda"};
constexpr const char* kAcks[] = {" That sounds lovely.", " Thank you for sharing that.", " I see.",
                                 " How nice.", " Good to know."};

std::vector<int32_t> text(const Tokenizer& tok, const std::string& s) { return tok.encode(s, false, true); }

void append(std::vector<int32_t>& a, const std::vector<int32_t>& b) { a.insert(a.end(), b.begin(), b.end()); }

}  // namespace

Result<std::vector<FidelityTask>> make_chat_tasks(const Tokenizer& tok, const FidelityTaskOptions& o) {
  const int32_t n_rel = static_cast<int32_t>(std::size(kRelations));
  if (o.facts < 1 || o.facts > std::min(o.n_docs, n_rel)) {
    return make_error(ErrorCode::kInvalidArgument, "chat: need 1 <= facts <= turns (--docs) and <= ", n_rel);
  }
  std::mt19937_64 rng(o.seed);
  std::vector<FidelityTask> tasks;
  const auto user_open = text(tok, "<|im_start|>user\n");
  const auto user_close = text(tok, "<|im_end|>\n<|im_start|>assistant\n");
  const auto turn_close = text(tok, "<|im_end|>\n");
  const int32_t markup = static_cast<int32_t>(user_open.size() + user_close.size() + turn_close.size());
  if (o.doc_tokens < markup + 16) {
    return make_error(ErrorCode::kInvalidArgument, "chat: a turn needs >= ", markup + 16, " tokens");
  }
  for (int32_t i = 0; i < o.n_prompts; ++i) {
    FidelityTask t;
    t.kind = "chat";
    t.head = text(tok,
                  "<|im_start|>system\nYou are a helpful assistant. Answer the user's question from the "
                  "conversation so far.<|im_end|>\n");
    t.cache_head = text(tok, "<|im_start|>system\nYou are a friendly assistant.<|im_end|>\n");
    t.cache_group = o.session_turns;
    // Fact 0 is asked; it is told in an early turn (the first half, cycling
    // over prompts), the others in distinct turns anywhere.
    const int32_t early = std::max<int32_t>(o.n_docs / 2, 1);
    std::vector<int32_t> turn_of(static_cast<size_t>(o.facts));
    turn_of[0] = i % early;
    std::vector<int32_t> others = task_shuffled_order(o.n_docs, rng);
    others.erase(std::remove(others.begin(), others.end(), turn_of[0]), others.end());
    for (int32_t f = 1; f < o.facts; ++f) turn_of[f] = others[f - 1];
    std::vector<int32_t> rel = task_shuffled_order(n_rel, rng);
    std::vector<int32_t> name = task_shuffled_order(static_cast<int32_t>(std::size(kNames)), rng);
    for (int32_t d = 0; d < o.n_docs; ++d) {
      std::vector<std::string> inserts;
      for (int32_t f = 0; f < o.facts; ++f) {
        if (turn_of[f] == d) {
          inserts.push_back(std::string(" By the way, my ") + kRelations[rel[f]] + "'s name is " +
                            kNames[name[f]] + ".");
        }
      }
      // The user speaks about two thirds of the turn, the assistant the rest.
      const int32_t body = o.doc_tokens - markup;
      const int32_t user_tokens = body * 2 / 3;
      std::vector<int32_t> turn = user_open;
      append(turn, task_filler_with(tok, rng, user_tokens, inserts));
      append(turn, user_close);
      const std::string ack = kAcks[rng() % std::size(kAcks)];
      const auto ack_ids = tok.encode(ack, false, false);
      append(turn, ack_ids);
      append(turn, task_filler_with(
                       tok, rng,
                       std::max<int32_t>(body - user_tokens - static_cast<int32_t>(ack_ids.size()), 1), {}));
      append(turn, turn_close);
      t.docs.push_back(std::move(turn));
    }
    const std::string asked = kRelations[rel[0]];
    t.tail = text(tok, "<|im_start|>user\nWhat is my " + asked +
                           "'s name?<|im_end|>\n<|im_start|>assistant\nYour " + asked + "'s name is");
    t.answers = {kNames[name[0]]};
    for (int32_t d = 0; d < o.n_docs; ++d) t.cache_order.push_back(d);
    tasks.push_back(std::move(t));
  }
  return tasks;
}

Result<std::vector<FidelityTask>> make_agent_tasks(const Tokenizer& tok, const FidelityTaskOptions& o) {
  if (o.agent_tokens < 1) return make_error(ErrorCode::kInvalidArgument, "agents: need --agent-tokens >= 1");
  if (o.n_docs > static_cast<int32_t>(task_nouns().size())) {
    return make_error(ErrorCode::kInvalidArgument, "agents: at most ", task_nouns().size(), " agents");
  }
  std::mt19937_64 rng(o.seed);
  std::vector<FidelityTask> tasks;
  for (int32_t i = 0; i < o.n_prompts; ++i) {
    FidelityTask t;
    t.kind = "agents";
    t.head = task_chat_head(tok, "You are the judge. " + std::to_string(o.n_docs) +
                                     " agents each read a note and reported its special magic number. Their "
                                     "reports follow.");
    t.produce_tokens = o.agent_tokens;
    // Each agent's note holds the number of its own noun, so the judge's
    // question names what it asks about (as mq-niah's does).
    const std::vector<std::string> nouns = task_pick_nouns(rng, static_cast<size_t>(o.n_docs));
    std::vector<std::string> values;
    while (static_cast<int32_t>(values.size()) < o.n_docs) {
      const std::string v = std::to_string(task_uniform(rng, 10000, 99999));
      if (std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
    }
    for (int32_t d = 0; d < o.n_docs; ++d) {
      std::vector<int32_t> p = task_chat_head(tok, "Note:");
      append(p, task_filler_with(tok, rng, o.doc_tokens,
                                 {" The special magic number for " + nouns[d] + " is " + values[d] + "."}));
      append(p,
             text(tok, "\nYou are agent " + std::to_string(d + 1) +
                           " of a team. What is the special magic number "
                           "for " +
                           nouns[d] + "? Give it, then repeat the note.<|im_end|>\n<|im_start|>assistant\n"));
      t.producers.push_back(std::move(p));
      t.docs.push_back(tok.encode("\nAgent " + std::to_string(d + 1) + " reported:", false, false));
    }
    const int32_t asked = i % o.n_docs;
    t.tail = task_chat_tail(tok, rng, "What is the special magic number for " + nouns[asked] + "?",
                            "The special magic number for " + nouns[asked] + " is", o.question_tokens);
    t.answers = {values[asked]};
    t.cache_order = task_shuffled_order(o.n_docs, rng);
    tasks.push_back(std::move(t));
  }
  return tasks;
}

}  // namespace agentkv
