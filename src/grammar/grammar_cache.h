// Compiles grammars against the served model's vocabulary with xgrammar and
// keeps them: a schema used again costs a map lookup, not a compilation.
// Thread-safe: the HTTP threads compile, each engine request takes a matcher.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "agentkv/constraint.h"
#include "grammar/grammar_spec.h"
#include "util/status.h"

namespace agentkv {

class Tokenizer;

struct GrammarCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;           // compilations (failed ones included)
  double compile_seconds = 0;   // summed over the misses
  double last_compile_seconds = 0;
  int32_t entries = 0;
};

class GrammarCache {
 public:
  // n_vocab: the logits row length (may exceed the tokenizer's vocabulary;
  // the rest are never allowed). max_entries: compiled grammars kept (LRU).
  static Result<std::unique_ptr<GrammarCache>> create(const Tokenizer& tok, int32_t n_vocab,
                                                      int32_t max_entries = 256);
  // The same over a vocabulary given as raw token bytes ("" = a control
  // token that no grammar text may use) and its end-of-generation ids: for
  // tests and the fuzz target, which have no model.
  static Result<std::unique_ptr<GrammarCache>> create(std::vector<std::string> pieces, std::vector<int32_t> stops,
                                                      int32_t n_vocab, int32_t max_entries = 256);
  ~GrammarCache();

  // The compiled grammar. Errors are kInvalidArgument with the library's
  // reason (a malformed schema, an unsupported feature, a grammar over the
  // limits of grammar_spec.h); they are not cached.
  Result<std::shared_ptr<const TokenConstraint>> get(const GrammarSpec& spec);

  GrammarCacheStats stats() const;
  int32_t n_vocab() const { return n_vocab_; }

  struct Impl;

 private:
  explicit GrammarCache(std::unique_ptr<Impl> impl, int32_t n_vocab, int32_t max_entries);

  std::unique_ptr<Impl> impl_;
  int32_t n_vocab_;
  int32_t max_entries_;
  mutable std::mutex mu_;
  // LRU: front is the most recent.
  std::list<std::pair<std::string, std::shared_ptr<const TokenConstraint>>> lru_;
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;
  GrammarCacheStats stats_;
};

// The static checks of grammar_spec.h's limits (size, regex repetition),
// without compiling: kInvalidArgument naming what is over.
Status grammar_check_limits(const GrammarSpec& spec);

}  // namespace agentkv
