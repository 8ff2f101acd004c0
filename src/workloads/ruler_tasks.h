// Seeded analogs of the RULER tasks that SparseX's Table 2 reports (Hsieh et
// al. 2024, "RULER: What's the Real Context Size of Your Long-Context
// Language Models?", §3; docs/scheme_algorithms.md §2.5), at bench-fidelity's scale: the
// context is split into n documents, the instruction is in the head and the
// question in the tail. Templates follow RULER's; the shapes (needles,
// hops, word counts) come from FidelityTaskOptions.
#pragma once

#include <vector>

#include "workloads/fidelity_tasks.h"

namespace agentkv {

// Multi-query needle in a haystack: `needles` sentences "The special magic
// number for KEY is VALUE." (distinct noun keys, seven-digit values) spread
// over the documents' filler; the question asks for `queries` of the keys.
Result<std::vector<FidelityTask>> make_mq_niah_tasks(const Tokenizer& tok, const FidelityTaskOptions& o);

// Variable tracking: `chains` chains "VAR A = 12345.", "VAR B = VAR A.", ...
// of 1 + `hops` assignments each, in order over the documents' filler; the
// question asks which variables hold the first chain's value.
Result<std::vector<FidelityTask>> make_vt_tasks(const Tokenizer& tok, const FidelityTaskOptions& o);

// Common word extraction: a numbered list of nouns in which `answer_words`
// nouns occur `common_freq` times and the others `rare_freq` times; the
// question asks for the most common ones.
Result<std::vector<FidelityTask>> make_cwe_tasks(const Tokenizer& tok, const FidelityTaskOptions& o);

// Frequent word extraction: coded text of random letter strings whose
// counts follow a Zipf law of exponent `zipf_alpha` by rank; rank 1 is the
// noise "....", ranks 2-4 are the answer.
Result<std::vector<FidelityTask>> make_fwe_tasks(const Tokenizer& tok, const FidelityTaskOptions& o);

}  // namespace agentkv
