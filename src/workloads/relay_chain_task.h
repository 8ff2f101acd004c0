// The accuracy task of `agentkv bench-relay --workload accuracy-chain`: a
// three-agent chain over a seeded list of records (RelayCaching's chains,
// docs/scheme_algorithms.md §3.6, at a size SmolLM2-135M can solve). Each record is one
// line, "- The home city of Maria is Paris."; the question asks for one
// person's city. The Extractor copies that person's record, the Reasoner
// says the city, and the Answerer states "Answer: <city>". Text only (no
// tokenizer, no model): a pure function of the seed, so a seed fixes every
// instance. The record format and the default of 3 records were calibrated
// with full prefill only (docs/usage.md, "bench-relay").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace agentkv {

struct RelayTaskOptions {
  int32_t records = 3;  // lines in the document, 2..kRelayTaskMaxRecords; the difficulty
  uint64_t seed = 1;
};

inline constexpr int32_t kRelayTaskMaxRecords = 16;

struct RelayRecord {
  std::string name, city;
};

// One agent's own text: the role header it starts with (its system message),
// the label its output carries in later agents' prompts, and the instruction
// that ends its prompt.
struct RelayAgentText {
  std::string role;
  std::string label;
  std::string suffix;
};

struct RelayTask {
  std::vector<RelayRecord> records;      // in document order; names and cities distinct
  int32_t target = 0;                    // the record asked about
  std::string document;                  // "Records:\n" and one line per record
  std::string question;                  // "Question: In which city does <name> live?"
  std::string answer;                    // records[target].city
  std::vector<std::string> distractors;  // the other records' cities
  std::vector<RelayAgentText> agents;    // Extractor, Reasoner, Answerer
};

// `n` instances; instance i depends only on (seed, i).
std::vector<RelayTask> make_relay_tasks(const RelayTaskOptions& o, int32_t n);

// Correct: the answer's city is in `output` (ignoring case) and no other
// record's city is, so an output that copies every record scores nothing.
bool relay_answer_correct(const std::string& output, const RelayTask& t);

// The word lists: distinct, and none a substring of another (ignoring case).
const std::vector<std::string>& relay_task_names();
const std::vector<std::string>& relay_task_cities();

}  // namespace agentkv
