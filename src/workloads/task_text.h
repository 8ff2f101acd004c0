// Pieces the bench-fidelity task generators share: filler sentences (the
// haystack of passkey and RULER's needle tasks), chat heads and tails, and
// documents assembled from separately tokenized pieces. Every function
// draws from the caller's generator in a fixed order, so a seed fixes the
// prompts.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace agentkv {

// One sentence of the passkey-retrieval filler family, with a leading space.
std::string task_filler_sentence(std::mt19937_64& rng);

// Filler sentences, each tokenized alone, until `n` tokens, then cut to
// exactly n. The `inserts` (in order, each tokenized alone and never cut)
// go between sentences at random boundaries; the filler is shortened by
// their length, so the result is n tokens unless they alone exceed it.
std::vector<int32_t> task_filler_with(const Tokenizer& tok, std::mt19937_64& rng, int32_t n,
                                      const std::vector<std::string>& inserts);

// "\nDocument <index + 1>:" and then task_filler_with's body, `doc_tokens`
// tokens in all (the label counts), holding the `inserts`.
std::vector<int32_t> task_document(const Tokenizer& tok, std::mt19937_64& rng, int32_t index,
                                   int32_t doc_tokens, const std::vector<std::string>& inserts);

// "<|im_start|>user\n" + instruction + "\n".
std::vector<int32_t> task_chat_head(const Tokenizer& tok, const std::string& instruction);

// The preamble a document is cached behind when it is cached alone.
std::vector<int32_t> task_cache_head(const Tokenizer& tok);

// "\n" + question + end of turn + assistant header + answer prefix, after
// filler up to question_tokens in all when question_tokens is larger.
std::vector<int32_t> task_chat_tail(const Tokenizer& tok, std::mt19937_64& rng, const std::string& question,
                                    const std::string& answer_prefix, int32_t question_tokens);

// A random permutation of 0..n-1.
std::vector<int32_t> task_shuffled_order(int32_t n, std::mt19937_64& rng);

// Splits separately tokenized pieces, in order, into n documents of nearly
// equal token counts (a piece is never split): a piece goes to the document
// in which its first token falls.
std::vector<std::vector<int32_t>> task_split_pieces(const std::vector<std::vector<int32_t>>& pieces,
                                                    int32_t n);

// A uniform integer in [lo, hi].
int64_t task_uniform(std::mt19937_64& rng, int64_t lo, int64_t hi);

}  // namespace agentkv
