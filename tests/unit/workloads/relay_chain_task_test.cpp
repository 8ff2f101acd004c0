// bench-relay's accuracy task (no model needed): a seed fixes every instance
// and instance i does not depend on how many are made, the expected answer is
// the asked person's city in the document, and scoring rejects an output that
// names any other record's city.
#include "workloads/relay_chain_task.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <set>

namespace agentkv {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

TEST(RelayChainTask, DeterministicPerSeedAndInstanceIndependentOfTheCount) {
  RelayTaskOptions o;
  o.seed = 7;
  const auto a = make_relay_tasks(o, 20);
  const auto b = make_relay_tasks(o, 5);
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 5u);
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_EQ(a[i].document, b[i].document);
    EXPECT_EQ(a[i].question, b[i].question);
    EXPECT_EQ(a[i].answer, b[i].answer);
  }
  o.seed = 8;
  const auto c = make_relay_tasks(o, 20);
  int same = 0;
  for (size_t i = 0; i < c.size(); ++i) same += c[i].document == a[i].document;
  EXPECT_LT(same, 3);
  // Instances differ from each other too.
  std::set<std::string> docs;
  for (const RelayTask& t : a) docs.insert(t.document);
  EXPECT_GT(docs.size(), 15u);
}

TEST(RelayChainTask, TheAnswerIsTheAskedPersonsCityInTheDocument) {
  for (int32_t records : {2, 3, 6, kRelayTaskMaxRecords}) {
    RelayTaskOptions o;
    o.records = records;
    o.seed = 3;
    for (const RelayTask& t : make_relay_tasks(o, 30)) {
      ASSERT_EQ(t.records.size(), static_cast<size_t>(records));
      ASSERT_GE(t.target, 0);
      ASSERT_LT(t.target, records);
      const RelayRecord& target = t.records[static_cast<size_t>(t.target)];
      EXPECT_EQ(t.answer, target.city);
      // The document states the target's record, once, and the question and
      // every agent's instruction name the person (not the answer).
      EXPECT_EQ(count(t.document, "The home city of " + target.name + " is " + target.city + "."), 1u);
      EXPECT_EQ(count(t.document, t.answer), 1u);
      EXPECT_NE(t.question.find(target.name), std::string::npos);
      EXPECT_EQ(t.question.find(t.answer), std::string::npos);
      ASSERT_EQ(t.agents.size(), 3u);
      for (const RelayAgentText& ag : t.agents) {
        EXPECT_NE(ag.suffix.find(target.name), std::string::npos);
        EXPECT_EQ(ag.suffix.find(t.answer), std::string::npos);
        EXPECT_EQ(ag.role.find(t.answer), std::string::npos);
      }
      // Names and cities are distinct, and the distractors are exactly the others.
      std::set<std::string> names, cities;
      for (const RelayRecord& r : t.records) names.insert(r.name), cities.insert(r.city);
      EXPECT_EQ(names.size(), t.records.size());
      EXPECT_EQ(cities.size(), t.records.size());
      EXPECT_EQ(t.distractors.size(), t.records.size() - 1);
      for (const std::string& d : t.distractors) {
        EXPECT_NE(d, t.answer);
        EXPECT_TRUE(cities.count(d));
      }
    }
  }
}

TEST(RelayChainTask, TheAskedRecordIsSpreadOverPositions) {
  RelayTaskOptions o;
  o.records = 3;
  std::vector<int> at(3, 0);
  for (const RelayTask& t : make_relay_tasks(o, 300)) ++at[static_cast<size_t>(t.target)];
  for (int n : at) EXPECT_GT(n, 60) << "the target record should be first, middle or last alike";
}

TEST(RelayChainTask, ScoringNeedsTheAnswerAndNoOtherCity) {
  RelayTaskOptions o;
  o.records = 3;
  const RelayTask t = make_relay_tasks(o, 1)[0];
  EXPECT_TRUE(relay_answer_correct("Answer: " + t.answer, t));
  EXPECT_TRUE(relay_answer_correct("answer: " + lower(t.answer) + ".", t));
  EXPECT_FALSE(relay_answer_correct("Answer: <city>", t));
  EXPECT_FALSE(relay_answer_correct("", t));
  // Copying the whole document names every city: not an answer.
  EXPECT_FALSE(relay_answer_correct(t.document, t));
  EXPECT_FALSE(relay_answer_correct(t.answer + " or " + t.distractors[0], t));
}

TEST(RelayChainTask, WordListsAreDistinctAndNoneIsPartOfAnother) {
  for (const auto* list : {&relay_task_names(), &relay_task_cities()}) {
    ASSERT_GE(list->size(), static_cast<size_t>(kRelayTaskMaxRecords));
    for (size_t i = 0; i < list->size(); ++i) {
      for (size_t j = 0; j < list->size(); ++j) {
        if (i != j) {
          EXPECT_EQ(lower((*list)[j]).find(lower((*list)[i])), std::string::npos)
              << (*list)[i] << " in " << (*list)[j];
        }
      }
    }
  }
  // A city is never part of a name or of the fixed text of a record line.
  for (const std::string& c : relay_task_cities()) {
    for (const std::string& n : relay_task_names()) EXPECT_EQ(lower(n).find(lower(c)), std::string::npos);
    EXPECT_EQ(lower("- The home city of  is .").find(lower(c)), std::string::npos);
  }
}

}  // namespace
}  // namespace agentkv
