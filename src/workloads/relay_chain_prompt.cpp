#include "workloads/relay_chain_prompt.h"

#include <random>

#include "workloads/task_text.h"

namespace agentkv {

ChainPromptBuilder::ChainPromptBuilder(const Tokenizer& tok)
    : tok_(tok),
      chat_(tok.find_token("<|im_start|>").has_value() && tok.find_token("<|im_end|>").has_value()) {}

std::vector<int32_t> ChainPromptBuilder::head(const std::string& role) const {
  if (chat_)
    return tok_.encode("<|im_start|>system\n" + role + "<|im_end|>\n<|im_start|>user\n", false, true);
  return tok_.encode(role + "\n\n", true, false);
}

std::vector<int32_t> ChainPromptBuilder::label(const std::string& label) const {
  return tok_.encode("\n\n" + label + ":\n", false, false);
}

std::vector<int32_t> ChainPromptBuilder::tail(const std::string& suffix) const {
  if (chat_) return tok_.encode("\n\n" + suffix + "<|im_end|>\n<|im_start|>assistant\n", false, true);
  return tok_.encode("\n\n" + suffix + "\n", false, false);
}

std::vector<int32_t> ChainPromptBuilder::build(const std::string& role, const std::vector<int32_t>& body,
                                               const std::vector<ChainUpstream>& upstream,
                                               const std::string& suffix) const {
  std::vector<int32_t> p = head(role);
  p.insert(p.end(), body.begin(), body.end());
  for (const ChainUpstream& u : upstream) {
    const std::vector<int32_t> l = label(u.label);
    p.insert(p.end(), l.begin(), l.end());
    p.insert(p.end(), u.tokens.begin(), u.tokens.end());
  }
  const std::vector<int32_t> t = tail(suffix);
  p.insert(p.end(), t.begin(), t.end());
  return p;
}

const std::vector<ChainRole>& chain_agent_roles() {
  static const std::vector<ChainRole> roles = {
      {"Planning is your job: you are the first of five assistants on one problem. Read the question, "
       "then lay out a numbered plan of the steps the team should take, with the facts each step needs.",
       "Planner", "Write the plan."},
      {"Solving is your job: you are the second of five assistants on one problem. Follow the planner's "
       "steps one by one, show every intermediate result, and keep your reasoning explicit.",
       "Solver", "Carry out the plan."},
      {"Checking is your job: you are the third of five assistants on one problem. Go through the "
       "solver's work line by line, point out every mistake or gap, and say how to repair it.",
       "Checker", "Review the work so far."},
      {"Refining is your job: you are the fourth of five assistants on one problem. Merge the solution "
       "and the review into one corrected solution, keeping what was right and fixing what was not.",
       "Refiner", "Write the corrected solution."},
      {"Deciding is your job: you are the last of five assistants on one problem. Weigh everything the "
       "team wrote and state the final answer with a short justification.",
       "Decider", "Give the final answer."},
  };
  return roles;
}

std::vector<int32_t> chain_question_body(const Tokenizer& tok, uint64_t seed, int32_t n) {
  std::mt19937_64 rng(seed);
  const int64_t a = task_uniform(rng, 12, 99), b = task_uniform(rng, 3, 9), c = task_uniform(rng, 100, 999);
  std::vector<int32_t> body = tok.encode(
      "Question: A garden has " + std::to_string(a) + " rows of " + std::to_string(b) +
          " trees, and each tree gives " + std::to_string(c) +
          " apples a year. How many apples does the garden give in a year, and how many in ten years?\n"
          "Background:",
      false, false);
  if (static_cast<int32_t>(body.size()) >= n) {
    body.resize(static_cast<size_t>(std::max(n, 0)));
    return body;
  }
  const std::vector<int32_t> filler = task_filler_with(tok, rng, n - static_cast<int32_t>(body.size()), {});
  body.insert(body.end(), filler.begin(), filler.end());
  return body;
}

}  // namespace agentkv
