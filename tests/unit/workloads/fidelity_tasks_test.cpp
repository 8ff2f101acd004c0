// bench-fidelity's task generators on the real tokenizer: each kind is
// deterministic for a seed, its documents are the prompt's token runs (so a
// cached document is found as a segment), its expected answers really are
// the answers of its context, and its prompts keep to the asked size.
#include "workloads/fidelity_tasks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "format/gguf.h"
#include "model_tokenizer.h"
#include "workloads/task_words.h"

namespace agentkv {
namespace {

FidelityTaskOptions shape(const std::string& kind, int32_t prompts = 6) {
  auto o = fidelity_task_defaults(kind);
  EXPECT_TRUE(o.is_ok()) << kind;
  FidelityTaskOptions r = *o;
  r.n_prompts = prompts;
  r.seed = 11;
  return r;
}

std::string docs_text(const Tokenizer& tok, const FidelityTask& t) {
  std::string s;
  for (const auto& d : t.docs) s += tok.decode(d);
  return s;
}

// Counts of the words of `text` made of letters only ("17." and "...." skipped).
std::map<std::string, int> word_counts(const std::string& text) {
  std::map<std::string, int> c;
  std::istringstream in(text);
  for (std::string w; in >> w;) {
    if (std::all_of(w.begin(), w.end(), [](char ch) { return ch >= 'a' && ch <= 'z'; })) ++c[w];
  }
  return c;
}

// The answers are exactly the words of the k highest counts, each strictly
// above every other word's.
void expect_top_words(const std::map<std::string, int>& counts, const std::vector<std::string>& answers) {
  int lowest_answer = INT32_MAX, highest_other = 0;
  for (const auto& [w, n] : counts) {
    if (std::find(answers.begin(), answers.end(), w) != answers.end()) {
      lowest_answer = std::min(lowest_answer, n);
    } else {
      highest_other = std::max(highest_other, n);
    }
  }
  for (const std::string& a : answers) EXPECT_TRUE(counts.count(a)) << a << " is not in the context";
  EXPECT_GT(lowest_answer, highest_other);
}

TEST(FidelityTasks, EveryKindHasDefaultsAndAnUnknownOneIsAnError) {
  for (const std::string& k : fidelity_task_kinds()) EXPECT_TRUE(fidelity_task_defaults(k).is_ok()) << k;
  EXPECT_FALSE(fidelity_task_defaults("niah").is_ok());
}

TEST(FidelityTasks, AnswerScoreIsTheShareOfAnswersFoundIgnoringCase) {
  EXPECT_DOUBLE_EQ(fidelity_answer_score("The words are Apple, river.", {"apple", "river", "stone"}),
                   2.0 / 3);
  EXPECT_DOUBLE_EQ(fidelity_answer_score(" 12345.", {"12345"}), 1.0);
  EXPECT_DOUBLE_EQ(fidelity_answer_score("nothing", {"12345"}), 0.0);
  EXPECT_DOUBLE_EQ(fidelity_answer_score("x", {}), 0.0);
}

TEST(FidelityTasks, NounsAreDistinctAndNoneIsPartOfAnother) {
  const auto& w = task_nouns();
  for (size_t i = 0; i < w.size(); ++i) {
    for (size_t j = 0; j < w.size(); ++j) {
      if (i != j) {
        EXPECT_EQ(w[j].find(w[i]), std::string::npos) << w[i] << " in " << w[j];
      }
    }
  }
}

TEST(FidelityTasks, DeterministicForASeedAndDocumentsAreThePromptsRuns) {
  REQUIRE_TOKENIZER();
  for (const std::string& kind : fidelity_task_kinds()) {
    SCOPED_TRACE(kind);
    const FidelityTaskOptions o = shape(kind);
    auto a = make_fidelity_tasks(tok, o);
    auto b = make_fidelity_tasks(tok, o);
    ASSERT_TRUE(a.is_ok()) << a.status().message();
    ASSERT_TRUE(b.is_ok());
    FidelityTaskOptions o2 = o;
    o2.seed = 12;
    auto c = make_fidelity_tasks(tok, o2);
    ASSERT_TRUE(c.is_ok());
    ASSERT_EQ(a->size(), static_cast<size_t>(o.n_prompts));
    for (size_t i = 0; i < a->size(); ++i) {
      const FidelityTask& t = (*a)[i];
      EXPECT_EQ(t.kind, kind);
      EXPECT_EQ(t.prompt(), (*b)[i].prompt());
      EXPECT_EQ(t.answers, (*b)[i].answers);
      EXPECT_EQ(t.cache_order, (*b)[i].cache_order);
      EXPECT_FALSE(t.answers.empty());
      // The prompt is head, then each document's ids unchanged, then tail.
      const std::vector<int32_t> p = t.prompt();
      size_t at = t.head.size();
      EXPECT_TRUE(std::equal(t.head.begin(), t.head.end(), p.begin()));
      ASSERT_EQ(t.docs.size(), static_cast<size_t>(o.n_docs));
      for (const auto& d : t.docs) {
        ASSERT_FALSE(d.empty());
        ASSERT_LE(at + d.size(), p.size());
        EXPECT_TRUE(std::equal(d.begin(), d.end(), p.begin() + static_cast<ptrdiff_t>(at)));
        at += d.size();
      }
      EXPECT_EQ(at + t.tail.size(), p.size());
      // The documents' text is not split by the chat markup, and the cache
      // preamble is not the prompt's head (no document is a prefix hit).
      EXPECT_NE(t.cache_head, t.head);
      std::vector<int32_t> order = t.cache_order;
      std::sort(order.begin(), order.end());
      for (int32_t d = 0; d < o.n_docs; ++d) EXPECT_EQ(order[d], d);
    }
    EXPECT_NE((*a)[0].prompt(), (*c)[0].prompt());
  }
}

TEST(FidelityTasks, PromptsKeepToTheAskedSize) {
  REQUIRE_TOKENIZER();
  for (const std::string& kind : fidelity_task_kinds()) {
    SCOPED_TRACE(kind);
    for (int32_t doc_tokens : {200, 450}) {
      FidelityTaskOptions o = shape(kind, 4);
      o.doc_tokens = doc_tokens;
      auto ts = make_fidelity_tasks(tok, o);
      ASSERT_TRUE(ts.is_ok()) << ts.status().message();
      for (const FidelityTask& t : *ts) {
        // An agent's document is its label until the bench appends the
        // report; its note is doc_tokens, in the agent's prompt.
        for (const auto& p : t.producers) {
          EXPECT_GE(static_cast<int32_t>(p.size()), doc_tokens);
          EXPECT_LE(static_cast<int32_t>(p.size()), doc_tokens + 80);
        }
        if (!t.producers.empty()) continue;
        for (const auto& d : t.docs) {
          EXPECT_LE(static_cast<int32_t>(d.size()), doc_tokens);
          // cwe and fwe fill up to the size, the others hit it exactly;
          // cwe's list also ends when its nouns run out (about 1400 tokens).
          if (kind != "cwe" || doc_tokens <= 200) {
            EXPECT_GE(static_cast<int32_t>(d.size()), doc_tokens * 8 / 10);
          }
        }
        EXPECT_LE(t.prompt().size(), static_cast<size_t>(o.n_docs * doc_tokens + 150));
      }
    }
  }
  // The calibrated defaults stay under 2K tokens.
  for (const std::string& kind : fidelity_task_kinds()) {
    auto ts = make_fidelity_tasks(tok, shape(kind, 2));
    ASSERT_TRUE(ts.is_ok());
    EXPECT_LE((*ts)[0].prompt().size(), 2048u) << kind;
  }
}

TEST(FidelityTasks, TooShortDocumentsForTheNeedlesAreAnError) {
  REQUIRE_TOKENIZER();
  FidelityTaskOptions o = shape("mq-niah", 2);
  o.needles = 40;
  o.queries = 2;
  o.doc_tokens = 60;
  EXPECT_FALSE(make_fidelity_tasks(tok, o).is_ok());
  o = shape("cwe", 2);
  o.common_freq = 200;
  EXPECT_FALSE(make_fidelity_tasks(tok, o).is_ok());
}

TEST(FidelityTasks, PasskeyPromptsAreThoseOfBeforeTheTaskKinds) {
  REQUIRE_TOKENIZER();
  // FNV-1a of 20 prompts, cache orders, cache heads and pass keys as the
  // generator made them when passkey was the only task (commit 10587ac).
  FidelityTaskOptions o;
  o.kind = "passkey";
  o.n_prompts = 20;
  o.seed = 7;
  o.question_tokens = 40;
  o.doc_tokens = 120;
  auto ts = make_fidelity_tasks(tok, o);
  ASSERT_TRUE(ts.is_ok());
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](int64_t x) { h = (h ^ static_cast<uint64_t>(x)) * 1099511628211ull; };
  for (const FidelityTask& t : *ts) {
    for (int32_t x : t.prompt()) mix(x);
    for (int32_t x : t.cache_order) mix(x);
    for (int32_t x : t.cache_head) mix(x);
    ASSERT_EQ(t.answers.size(), 1u);
    for (char ch : t.answers[0]) mix(ch);
  }
  EXPECT_EQ(h, 0xe8c43ba83003a956ull);
  // And the key is in its document.
  for (const FidelityTask& t : *ts)
    EXPECT_NE(docs_text(tok, t).find("pass key is " + t.answers[0]), std::string::npos);
}

TEST(FidelityTasks, RetrievalAsksForTheOneFactItsDocumentsTell) {
  REQUIRE_TOKENIZER();
  auto ts = make_fidelity_tasks(tok, shape("retrieval", 8));
  ASSERT_TRUE(ts.is_ok());
  const std::regex fact("([A-Z][a-z]+)'s ([a-z]+ [a-z]+) is ([0-9]{4})\\.");
  std::set<std::string> asked;
  for (size_t i = 0; i < ts->size(); ++i) {
    const FidelityTask& t = (*ts)[i];
    ASSERT_EQ(t.answers.size(), 1u);
    std::vector<size_t> holders;
    std::smatch m;
    for (size_t d = 0; d < t.docs.size(); ++d) {
      const std::string dt = tok.decode(t.docs[d]);
      if (std::regex_search(dt, m, fact)) holders.push_back(d);
    }
    // One document tells it, the i-th in turn, and it is the answer.
    ASSERT_EQ(holders.size(), 1u);
    EXPECT_EQ(holders[0], i % t.docs.size());
    const std::string dt = tok.decode(t.docs[holders[0]]);
    ASSERT_TRUE(std::regex_search(dt, m, fact));
    EXPECT_EQ(m[3].str(), t.answers[0]);
    // The question asks that person's attribute; the answer prefix does
    // not repeat it (with "NAME's ATTRIBUTE is" every scheme found the
    // number, so the task did not tell them apart).
    const std::string tail = tok.decode(t.tail);
    const std::string who = m[1].str() + "'s " + m[2].str();
    EXPECT_NE(tail.find("What is " + who + "?"), std::string::npos) << tail;
    EXPECT_EQ(tail.substr(tail.size() - 13), "The answer is");
    asked.insert(who);
  }
  EXPECT_GT(asked.size(), 4u);  // people and attributes vary between prompts
}

TEST(FidelityTasks, MqNiahAnswersAreTheAskedKeysNeedles) {
  REQUIRE_TOKENIZER();
  FidelityTaskOptions o = shape("mq-niah", 8);
  o.needles = 6;
  o.queries = 3;
  auto ts = make_fidelity_tasks(tok, o);
  ASSERT_TRUE(ts.is_ok());
  const std::regex needle("The special magic number for ([a-z]+) is ([0-9]+)\\.");
  for (const FidelityTask& t : *ts) {
    const std::string text = docs_text(tok, t);
    std::map<std::string, std::string> value_of;
    std::set<int> docs_with_needles;
    for (size_t d = 0; d < t.docs.size(); ++d) {
      const std::string dt = tok.decode(t.docs[d]);
      for (auto it = std::sregex_iterator(dt.begin(), dt.end(), needle); it != std::sregex_iterator(); ++it) {
        value_of[(*it)[1]] = (*it)[2];
        docs_with_needles.insert(static_cast<int>(d));
      }
    }
    EXPECT_EQ(value_of.size(), 6u);
    EXPECT_EQ(docs_with_needles.size(), 4u);  // 6 needles over 4 documents: every one holds some
    ASSERT_EQ(t.answers.size(), 3u);
    const std::string question = tok.decode(t.tail);
    for (const auto& [key, value] : value_of) {
      const bool asked = std::find(t.answers.begin(), t.answers.end(), value) != t.answers.end();
      EXPECT_EQ(asked, question.find(" " + key) != std::string::npos) << key;
    }
  }
}

TEST(FidelityTasks, VtChainResolvesToTheAskedValue) {
  REQUIRE_TOKENIZER();
  FidelityTaskOptions o = shape("vt", 8);
  o.chains = 2;
  o.hops = 3;
  auto ts = make_fidelity_tasks(tok, o);
  ASSERT_TRUE(ts.is_ok());
  const std::regex assign("VAR ([A-Z]+) = (VAR ([A-Z]+)|([0-9]+))\\.");
  for (const FidelityTask& t : *ts) {
    // Resolve in text order: a variable is assigned after the one it copies.
    const std::string text = docs_text(tok, t);
    std::map<std::string, std::string> value;
    int statements = 0;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), assign); it != std::sregex_iterator();
         ++it) {
      const std::string var = (*it)[1];
      if ((*it)[3].matched) {
        ASSERT_TRUE(value.count((*it)[3])) << (*it)[3] << " used before it is assigned";
        value[var] = value[(*it)[3]];
      } else {
        value[var] = (*it)[4];
      }
      ++statements;
    }
    EXPECT_EQ(statements, 8);
    const std::string tail = tok.decode(t.tail);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(tail, m, std::regex("assigned the value ([0-9]+) in")));
    std::set<std::string> holding;
    for (const auto& [var, v] : value)
      if (v == m[1]) holding.insert(var);
    EXPECT_EQ(holding, std::set<std::string>(t.answers.begin(), t.answers.end()));
    EXPECT_EQ(holding.size(), 4u);
  }
}

TEST(FidelityTasks, CweAnswersAreTheMostCommonWords) {
  REQUIRE_TOKENIZER();
  auto ts = make_fidelity_tasks(tok, shape("cwe", 8));
  ASSERT_TRUE(ts.is_ok());
  for (const FidelityTask& t : *ts) {
    const std::string text = docs_text(tok, t);
    expect_top_words(word_counts(text), t.answers);
    // The list is numbered 1..n across the documents.
    const auto counts = word_counts(text);
    int entries = 0;
    for (const auto& [w, n] : counts) entries += n;
    EXPECT_NE(text.find("\n" + std::to_string(entries) + ". "), std::string::npos);
    EXPECT_EQ(text.find("\n" + std::to_string(entries + 1) + ". "), std::string::npos);
  }
}

TEST(FidelityTasks, FweAnswersAreTheThreeMostFrequentCodedWords) {
  REQUIRE_TOKENIZER();
  auto ts = make_fidelity_tasks(tok, shape("fwe", 8));
  ASSERT_TRUE(ts.is_ok());
  for (const FidelityTask& t : *ts) {
    ASSERT_EQ(t.answers.size(), 3u);
    const std::string text = docs_text(tok, t);
    expect_top_words(word_counts(text), t.answers);
    EXPECT_NE(text.find(" ...."), std::string::npos);  // the noise rank
  }
}

TEST(FidelityTasks, ChatAsksAboutAFactToldInAnEarlyTurnOfSessionsCachedApart) {
  REQUIRE_TOKENIZER();
  FidelityTaskOptions o = shape("chat", 12);
  auto ts = make_fidelity_tasks(tok, o);
  ASSERT_TRUE(ts.is_ok()) << ts.status().message();
  const std::regex fact("my ([a-z]+)'s name is ([A-Z][a-z]+)\\.");
  std::set<int> asked_turns;
  for (const FidelityTask& t : *ts) {
    ASSERT_EQ(t.docs.size(), 8u);
    EXPECT_EQ(t.cache_group, 2);  // sessions of two turns, each cached alone
    EXPECT_EQ(t.cache_order, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
    std::map<std::string, std::string> name_of;
    std::map<std::string, int> turn_of;
    for (size_t d = 0; d < t.docs.size(); ++d) {
      const std::string turn = tok.decode(t.docs[d]);
      // A whole user turn and a whole assistant turn.
      EXPECT_EQ(turn.rfind("<|im_start|>user\n", 0), 0u) << turn;
      EXPECT_NE(turn.find("<|im_end|>\n<|im_start|>assistant\n"), std::string::npos);
      EXPECT_EQ(turn.substr(turn.size() - 11), "<|im_end|>\n");
      for (auto it = std::sregex_iterator(turn.begin(), turn.end(), fact); it != std::sregex_iterator();
           ++it) {
        EXPECT_FALSE(name_of.count((*it)[1])) << "a relation told twice";
        name_of[(*it)[1]] = (*it)[2];
        turn_of[(*it)[1]] = static_cast<int>(d);
      }
    }
    EXPECT_EQ(name_of.size(), 3u);
    std::smatch m;
    const std::string tail = tok.decode(t.tail);
    ASSERT_TRUE(std::regex_search(tail, m, std::regex("What is my ([a-z]+)'s name\\?")));
    ASSERT_EQ(t.answers.size(), 1u);
    EXPECT_EQ(name_of[m[1]], t.answers[0]);
    EXPECT_LT(turn_of[m[1]], 4) << "the asked fact is in the first half of the history";
    asked_turns.insert(turn_of[m[1]]);
    // No other name of the history holds the answer (substring match).
    for (const auto& [rel, name] : name_of) {
      if (rel != m[1].str()) {
        EXPECT_EQ(name.find(t.answers[0]), std::string::npos);
      }
    }
  }
  EXPECT_EQ(asked_turns.size(), 4u);  // every early turn is asked about
}

TEST(FidelityTasks, AgentsEachReadTheirOwnNumberAndTheJudgeAsksOne) {
  REQUIRE_TOKENIZER();
  FidelityTaskOptions o = shape("agents", 6);
  auto ts = make_fidelity_tasks(tok, o);
  ASSERT_TRUE(ts.is_ok()) << ts.status().message();
  const std::regex needle("The special magic number for ([a-z]+) is ([0-9]+)\\.");
  for (size_t i = 0; i < ts->size(); ++i) {
    const FidelityTask& t = (*ts)[i];
    ASSERT_EQ(t.producers.size(), 3u);
    EXPECT_EQ(t.produce_tokens, 96);
    EXPECT_TRUE(t.reports.empty());
    std::map<std::string, std::string> value_of;
    for (size_t d = 0; d < 3; ++d) {
      EXPECT_EQ(tok.decode(t.docs[d]), "\nAgent " + std::to_string(d + 1) + " reported:");
      const std::string p = tok.decode(t.producers[d]);
      std::smatch m;
      ASSERT_TRUE(std::regex_search(p, m, needle)) << p;
      value_of[m[1]] = m[2];
      // The agent is asked about its own noun.
      EXPECT_NE(p.find("What is the special magic number for " + m[1].str() + "?"), std::string::npos);
    }
    EXPECT_EQ(value_of.size(), 3u);
    std::smatch q;
    const std::string tail = tok.decode(t.tail);
    ASSERT_TRUE(std::regex_search(tail, q, std::regex("What is the special magic number for ([a-z]+)\\?")));
    ASSERT_EQ(t.answers.size(), 1u);
    EXPECT_EQ(value_of[q[1]], t.answers[0]);
    // The asked agent cycles over the prompts.
    const std::string asked_producer = tok.decode(t.producers[i % 3]);
    EXPECT_NE(asked_producer.find(" is " + t.answers[0] + "."), std::string::npos);
  }
}

}  // namespace
}  // namespace agentkv
