// The tasks of `agentkv bench-fidelity`, generated from a seed (nothing
// downloaded). Each prompt is a chat turn: a head (chat header and the
// task's instruction), n documents holding the context, and a tail (the
// question, the end of the turn and the assistant's answer prefix). Kinds:
//   passkey  one document hides a five-digit pass key (passkey_task.cpp);
//   retrieval  one document tells a person's four-digit number, which the
//            question asks for (retrieval_task.cpp);
//   mq-niah, vt, cwe, fwe  analogs of RULER's multi-query needle in a
//            haystack, variable tracking, common and frequent word
//            extraction (Hsieh et al. 2024, "RULER"; ruler_tasks.h);
//   chat, agents  multi-round chat and an agent workflow (SparseX's Tables 1
//            and 3; chat_task.h).
// Every piece is tokenized on its own and a document is a token vector, so
// its ids are the same in the request that caches it and in the prompt that
// reuses it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace agentkv {

// The shape of a task. fidelity_task_defaults(kind) gives each kind's
// calibrated shape (docs/usage.md); a field a kind does not use is ignored.
struct FidelityTaskOptions {
  std::string kind = "passkey";
  int32_t n_prompts = 50;
  int32_t n_docs = 4;
  int32_t doc_tokens = 80;      // passkey, retrieval, mq-niah, vt: exactly this many; cwe, fwe: at most
                                // (cwe also stops when its 159 nouns are used)
  int32_t question_tokens = 0;  // > 0: filler before the question up to this many tokens
  uint64_t seed = 1;
  int32_t needles = 4;        // mq-niah: key-value needles in the context
  int32_t queries = 2;        // mq-niah: keys asked (<= needles)
  int32_t chains = 1;         // vt: chains of assignments (the others are distractors)
  int32_t hops = 2;           // vt: assignments after the first in each chain
  int32_t answer_words = 3;   // cwe: common words asked (fwe always asks 3)
  int32_t common_freq = 25;   // cwe: occurrences of each common word
  int32_t rare_freq = 1;      // cwe: occurrences of every other word
  double zipf_alpha = 2.0;    // fwe: word counts proportional to rank^-alpha
  int32_t facts = 3;          // chat: facts told in the history (the first one asked)
  int32_t session_turns = 2;  // chat: turns cached together (a session)
  int32_t agent_tokens = 96;  // agents: most tokens of an agent's report (default 96)
};

struct FidelityTask {
  std::string kind;
  std::vector<int32_t> head;  // chat header + instruction
  // What the bench puts before a document when it caches it alone: another
  // preamble, so no document of the prompt is an exact prefix hit (each is
  // found as a segment, as in RAG where chunks are cached on their own).
  std::vector<int32_t> cache_head;
  std::vector<std::vector<int32_t>> docs;  // in prompt order
  std::vector<int32_t> tail;               // question, end of turn, assistant header + answer prefix
  // Strings a correct answer contains, all of them (RULER's string-match-all).
  std::vector<std::string> answers;
  // The order in which the bench caches the documents before the prompt
  // (each alone, behind cache_head): a permutation of 0..n_docs-1.
  std::vector<int32_t> cache_order;
  // How many documents were cached together: consecutive runs of
  // cache_order of this length, each in one request behind cache_head
  // (chat: a session of turns; 1: each document alone).
  int32_t cache_group = 1;
  // agents: document d ends with what producers[d] generates (greedy, at
  // most produce_tokens, to the end of its turn); docs[d] holds the label
  // before it until run_fidelity appends it. The cached copy of the report
  // is that request's own decode, not a prefill of the text.
  std::vector<std::vector<int32_t>> producers;
  int32_t produce_tokens = 0;
  std::vector<std::vector<int32_t>> reports;  // filled by run_fidelity

  std::vector<int32_t> prompt() const;
};

// "passkey", "retrieval", "mq-niah", "vt", "cwe", "fwe", "chat", "agents".
const std::vector<std::string>& fidelity_task_kinds();

// The calibrated shape of `kind` (n_prompts and seed at their defaults).
// An unknown kind is an error.
Result<FidelityTaskOptions> fidelity_task_defaults(const std::string& kind);

// Errors on an unknown kind or a shape the generator cannot build.
Result<std::vector<FidelityTask>> make_fidelity_tasks(const Tokenizer& tok, const FidelityTaskOptions& o);

// RULER's string_match_all: the share of `answers` found in `output`,
// ignoring case. 0 when there are no answers.
double fidelity_answer_score(const std::string& output, const std::vector<std::string>& answers);

}  // namespace agentkv
