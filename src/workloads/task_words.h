// Word lists of the bench-fidelity tasks: concrete nouns (needle keys of
// mq-niah, the words of cwe) and random coded words (fwe).
#pragma once

#include <random>
#include <string>
#include <vector>

namespace agentkv {

// Lowercase nouns, distinct, none a substring of another (an answer found
// by substring match is then never another word's part).
const std::vector<std::string>& task_nouns();

// `n` distinct nouns in a random order (n <= task_nouns().size()).
std::vector<std::string> task_pick_nouns(std::mt19937_64& rng, size_t n);

// `n` distinct lowercase strings of `len` random letters.
std::vector<std::string> task_coded_words(std::mt19937_64& rng, size_t n, size_t len);

// `n` distinct strings of `len` random uppercase letters (vt's variables).
std::vector<std::string> task_variable_names(std::mt19937_64& rng, size_t n, size_t len);

}  // namespace agentkv
