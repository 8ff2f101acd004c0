// bench-relay's prompts on the real tokenizer: agent i's prompt is its head,
// the body, each upstream output's ids verbatim behind its label, and its
// tail; every role fills at least one KV block and no two agents' prompts
// share their first block (so `none`'s exact prefix cache never serves one
// agent's sequence to the next); the TTFT chains' question has exactly the
// asked length.
#include "workloads/relay_chain_prompt.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>

#include "format/gguf.h"
#include "model_tokenizer.h"
#include "workloads/relay_chain_task.h"

namespace agentkv {
namespace {

constexpr size_t kBlock = 16;

bool has_at(const std::vector<int32_t>& p, size_t at, const std::vector<int32_t>& piece) {
  return at + piece.size() <= p.size() &&
         std::equal(piece.begin(), piece.end(), p.begin() + static_cast<ptrdiff_t>(at));
}

TEST(RelayChainPrompt, UpstreamIdsGoInVerbatimBetweenHeadAndTail) {
  REQUIRE_TOKENIZER();
  const ChainPromptBuilder b(tok);
  EXPECT_TRUE(b.chat()) << "SmolLM2's vocabulary is ChatML";
  const std::vector<int32_t> body = tok.encode("Records:\n- The home city of Anna is Lima.", false, false);
  // Generated ids need not be what encoding their text gives: a control
  // token (<|im_end|>) and a split word must survive as they are.
  const int32_t im_end = *tok.find_token("<|im_end|>");
  const std::vector<int32_t> out1 = {im_end, 1000, 2000, 3000, im_end};
  const std::vector<int32_t> out2 = {4000, 4001, 4002};
  const std::vector<ChainUpstream> up = {{"Extractor", out1}, {"Reasoner", out2}};
  const std::vector<int32_t> p = b.build("You are the Answerer.", body, up, "Reply as: Answer: <city>");
  size_t at = 0;
  for (const auto& piece : {b.head("You are the Answerer."), body, b.label("Extractor"), out1,
                            b.label("Reasoner"), out2, b.tail("Reply as: Answer: <city>")}) {
    ASSERT_TRUE(has_at(p, at, piece)) << "piece at " << at;
    at += piece.size();
  }
  EXPECT_EQ(at, p.size());
  // The chat frame: a system turn, then the user's, and the prompt opens the
  // assistant's turn.
  const std::string text = tok.decode(p);
  EXPECT_EQ(text.rfind("<|im_start|>system\nYou are the Answerer.<|im_end|>\n<|im_start|>user\n", 0), 0u);
  const std::string open = "Reply as: Answer: <city><|im_end|>\n<|im_start|>assistant\n";
  ASSERT_GT(text.size(), open.size());
  EXPECT_EQ(text.substr(text.size() - open.size()), open);
}

TEST(RelayChainPrompt, EveryRoleFillsABlockAndNoTwoAgentsShareTheFirstBlock) {
  REQUIRE_TOKENIZER();
  const ChainPromptBuilder b(tok);
  std::vector<std::string> roles;
  for (const ChainRole& r : chain_agent_roles()) roles.push_back(r.role);
  const std::vector<RelayTask> tasks = make_relay_tasks({}, 1);
  for (const RelayAgentText& a : tasks[0].agents) roles.push_back(a.role);
  ASSERT_EQ(roles.size(), 8u);
  for (size_t i = 0; i < roles.size(); ++i) {
    const auto hi = b.head(roles[i]);
    EXPECT_GE(hi.size(), kBlock) << roles[i];
    EXPECT_LE(hi.size(), 80u) << "a role is a few dozen tokens";
    for (size_t j = i + 1; j < roles.size(); ++j) {
      const auto hj = b.head(roles[j]);
      EXPECT_FALSE(std::equal(hi.begin(), hi.begin() + kBlock, hj.begin())) << roles[i] << " / " << roles[j];
    }
  }
}

TEST(RelayChainPrompt, TheQuestionBodyHasExactlyTheAskedLengthAndASeedFixesIt) {
  REQUIRE_TOKENIZER();
  for (int32_t n : {16, 64, 451, 2000}) {
    const auto a = chain_question_body(tok, 5, n);
    EXPECT_EQ(a.size(), static_cast<size_t>(n));
    EXPECT_EQ(a, chain_question_body(tok, 5, n));
  }
  EXPECT_NE(chain_question_body(tok, 5, 400), chain_question_body(tok, 6, 400));
  EXPECT_EQ(tok.decode(chain_question_body(tok, 5, 400)).rfind("Question: ", 0), 0u);
}

}  // namespace
}  // namespace agentkv
