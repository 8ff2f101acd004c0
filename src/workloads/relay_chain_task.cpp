#include "workloads/relay_chain_task.h"

#include <algorithm>
#include <cctype>
#include <random>

namespace agentkv {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// `n` distinct entries of `words`, in a random order.
std::vector<std::string> pick(const std::vector<std::string>& words, size_t n, std::mt19937_64& rng) {
  std::vector<std::string> w = words;
  std::shuffle(w.begin(), w.end(), rng);
  w.resize(std::min(n, w.size()));
  return w;
}

std::vector<RelayAgentText> agents_for(const std::string& who) {
  return {
      {"You are the Extractor, the first of three assistants working on one question. You read the "
       "records and copy the facts that matter, word for word, adding nothing.",
       "Extractor", "Copy the one record line about " + who + "."},
      {"You are the Reasoner, the second of three assistants working on one question. You read the "
       "Extractor's notes and work out which person and which city the question is about.",
       "Reasoner", "Using the Extractor's notes, say in which city " + who + " lives."},
      {"You are the Answerer, the last of three assistants working on one question. You give the "
       "team's final answer in one short line.",
       "Answerer", "In which city does " + who + " live? Reply as: Answer: <city>"},
  };
}

}  // namespace

const std::vector<std::string>& relay_task_names() {
  static const std::vector<std::string> w = {"Maria", "Tom",   "Anna", "Omar",  "Lena",  "Ivan",
                                             "Sofia", "Pedro", "Nina", "Hugo",  "Clara", "Yusuf",
                                             "Greta", "Marco", "Elsa", "Felix", "Rosa",  "Kenji"};
  return w;
}

const std::vector<std::string>& relay_task_cities() {
  static const std::vector<std::string> w = {"Paris",  "Cairo",  "Lima",   "Oslo",    "Tokyo",  "Berlin",
                                             "Madrid", "Dublin", "Vienna", "Prague",  "Athens", "Lisbon",
                                             "Seoul",  "Sydney", "Denver", "Chicago", "Warsaw", "Nairobi"};
  return w;
}

std::vector<RelayTask> make_relay_tasks(const RelayTaskOptions& o, int32_t n) {
  const size_t k = static_cast<size_t>(std::clamp(o.records, 2, kRelayTaskMaxRecords));
  std::vector<RelayTask> tasks;
  for (int32_t i = 0; i < n; ++i) {
    std::seed_seq seq{static_cast<uint32_t>(o.seed), static_cast<uint32_t>(o.seed >> 32),
                      static_cast<uint32_t>(i)};
    std::mt19937_64 rng(seq);
    RelayTask t;
    const auto names = pick(relay_task_names(), k, rng);
    const auto cities = pick(relay_task_cities(), k, rng);
    t.document = "Records:\n";
    for (size_t r = 0; r < k; ++r) {
      t.records.push_back({names[r], cities[r]});
      t.document += "- The home city of " + names[r] + " is " + cities[r] + ".\n";
    }
    t.target = static_cast<int32_t>(rng() % k);
    const RelayRecord& target = t.records[static_cast<size_t>(t.target)];
    t.question = "Question: In which city does " + target.name + " live?";
    t.answer = target.city;
    for (const RelayRecord& r : t.records) {
      if (r.city != t.answer) t.distractors.push_back(r.city);
    }
    t.agents = agents_for(target.name);
    tasks.push_back(std::move(t));
  }
  return tasks;
}

bool relay_answer_correct(const std::string& output, const RelayTask& t) {
  const std::string out = lower(output);
  if (out.find(lower(t.answer)) == std::string::npos) return false;
  for (const std::string& d : t.distractors) {
    if (out.find(lower(d)) != std::string::npos) return false;
  }
  return true;
}

}  // namespace agentkv
