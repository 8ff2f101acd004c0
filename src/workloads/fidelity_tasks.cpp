#include "workloads/fidelity_tasks.h"

#include <algorithm>
#include <cctype>

#include "workloads/chat_task.h"
#include "workloads/passkey_task.h"
#include "workloads/retrieval_task.h"
#include "workloads/ruler_tasks.h"

namespace agentkv {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::vector<int32_t> FidelityTask::prompt() const {
  std::vector<int32_t> p = head;
  for (const auto& d : docs) p.insert(p.end(), d.begin(), d.end());
  p.insert(p.end(), tail.begin(), tail.end());
  return p;
}

const std::vector<std::string>& fidelity_task_kinds() {
  static const std::vector<std::string> kinds = {"passkey", "retrieval", "mq-niah", "vt",
                                                 "cwe",     "fwe",       "chat",    "agents"};
  return kinds;
}

// The shapes measured in docs/benchmarks.md ("RULER-style tasks"): where
// SmolLM2-135M-Instruct with full recomputation answers clearly above
// chance, so that a scheme's loss shows in the accuracy.
Result<FidelityTaskOptions> fidelity_task_defaults(const std::string& kind) {
  FidelityTaskOptions o;
  o.kind = kind;
  if (kind == "passkey") {
    o.doc_tokens = 80;
  } else if (kind == "retrieval") {
    o.doc_tokens = 160;
  } else if (kind == "mq-niah") {
    o.doc_tokens = 200;
    o.needles = 4;
    o.queries = 2;
  } else if (kind == "vt") {
    o.doc_tokens = 200;
    o.chains = 1;
    o.hops = 2;
  } else if (kind == "cwe") {
    o.doc_tokens = 200;
    o.answer_words = 3;
    o.common_freq = 25;
    o.rare_freq = 1;
  } else if (kind == "fwe") {
    o.doc_tokens = 200;
    o.zipf_alpha = 2.0;
  } else if (kind == "chat") {
    o.n_docs = 8;
    o.doc_tokens = 100;
    o.facts = 3;
  } else if (kind == "agents") {
    o.n_docs = 3;
    o.doc_tokens = 120;
    o.agent_tokens = 96;
  } else {
    return make_error(ErrorCode::kInvalidArgument, "unknown task '", kind,
                      "' (passkey, retrieval, mq-niah, vt, cwe, fwe, chat, agents)");
  }
  return o;
}

Result<std::vector<FidelityTask>> make_fidelity_tasks(const Tokenizer& tok, const FidelityTaskOptions& o) {
  if (o.n_docs < 1 || o.doc_tokens < 16) {
    return make_error(ErrorCode::kInvalidArgument, "tasks need >= 1 document of >= 16 tokens");
  }
  Result<std::vector<FidelityTask>> tasks = std::vector<FidelityTask>{};
  if (o.kind == "passkey") {
    tasks = make_passkey_tasks(tok, o);
  } else if (o.kind == "retrieval") {
    tasks = make_retrieval_tasks(tok, o);
  } else if (o.kind == "mq-niah") {
    tasks = make_mq_niah_tasks(tok, o);
  } else if (o.kind == "vt") {
    tasks = make_vt_tasks(tok, o);
  } else if (o.kind == "cwe") {
    tasks = make_cwe_tasks(tok, o);
  } else if (o.kind == "fwe") {
    tasks = make_fwe_tasks(tok, o);
  } else if (o.kind == "chat") {
    tasks = make_chat_tasks(tok, o);
  } else if (o.kind == "agents") {
    tasks = make_agent_tasks(tok, o);
  } else {
    return make_error(ErrorCode::kInvalidArgument, "unknown task '", o.kind,
                      "' (passkey, retrieval, mq-niah, vt, cwe, fwe, chat, agents)");
  }
  if (!tasks.is_ok()) return tasks;
  // Needles and chains are never cut, so too short a document overflows.
  for (const FidelityTask& t : *tasks) {
    for (const auto& d : t.docs) {
      if (static_cast<int32_t>(d.size()) > o.doc_tokens) {
        return make_error(ErrorCode::kInvalidArgument, o.kind, ": ", d.size(),
                          "-token document exceeds --doc-tokens ", o.doc_tokens, " (the needles do not fit)");
      }
    }
  }
  return tasks;
}

double fidelity_answer_score(const std::string& output, const std::vector<std::string>& answers) {
  if (answers.empty()) return 0;
  const std::string out = lower(output);
  double found = 0;
  for (const std::string& a : answers) found += out.find(lower(a)) != std::string::npos;
  return found / static_cast<double>(answers.size());
}

}  // namespace agentkv
