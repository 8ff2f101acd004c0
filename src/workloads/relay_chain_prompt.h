// Prompts of an agent chain (`agentkv bench-relay`), built as token ids so
// that upstream agents' generated tokens go in verbatim (never detokenized and
// re-tokenized: segment reuse finds cached runs of token ids, docs/scheme_algorithms.md
// §3.7). Agent i's prompt is RelayCaching's [new prefix] + [relay segments] +
// [new suffix] (paper 003, §3.3):
//   head(role_i) + body + for each upstream j: label_j + out_j + tail(suffix_i)
// With a ChatML vocabulary (one that has <|im_start|>, as SmolLM2 and Qwen) the
// head is a system turn holding the role and the start of a user turn, and the
// tail ends the user turn and opens the assistant's; otherwise the pieces are
// raw text separated by blank lines. Each role starts with its own words, so
// no two agents' prompts share a first KV block: under `none` the exact
// prefix cache never serves one agent's sequence to the next.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace agentkv {

struct ChainUpstream {
  std::string label;            // e.g. "Extractor"
  std::vector<int32_t> tokens;  // its generated ids, as emitted
};

class ChainPromptBuilder {
 public:
  explicit ChainPromptBuilder(const Tokenizer& tok);

  bool chat() const { return chat_; }
  std::vector<int32_t> head(const std::string& role) const;
  std::vector<int32_t> label(const std::string& label) const;  // "\n\n<label>:\n"
  std::vector<int32_t> tail(const std::string& suffix) const;
  std::vector<int32_t> build(const std::string& role, const std::vector<int32_t>& body,
                             const std::vector<ChainUpstream>& upstream, const std::string& suffix) const;

 private:
  const Tokenizer& tok_;
  bool chat_ = false;
};

// The five agents of the TTFT chains (a planner to a decider, each with a role
// of a few dozen tokens and a suffix instruction). Agent i of a chain of n
// uses chain_agent_roles()[i] for i < n.
struct ChainRole {
  std::string role, label, suffix;
};
const std::vector<ChainRole>& chain_agent_roles();

// The TTFT chains' question: "Question: ..." and background sentences, seeded,
// exactly n tokens (n >= 16).
std::vector<int32_t> chain_question_body(const Tokenizer& tok, uint64_t seed, int32_t n);

}  // namespace agentkv
