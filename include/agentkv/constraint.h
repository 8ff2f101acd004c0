// A constraint on the tokens a request may generate (a JSON schema, a regex,
// a grammar), as the engine sees it: per request, a matcher that says which
// next tokens are allowed and follows the tokens sampled. The engine knows no
// grammar library; src/grammar/ implements these over xgrammar.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

namespace agentkv {

// One request's position in its grammar. Not thread-safe: the engine calls
// fill_mask() on its mask thread and accept() on the engine thread, never at
// once.
class TokenMatcher {
 public:
  virtual ~TokenMatcher() = default;
  // Sets bit (id % 32) of mask[id / 32] for every token the grammar allows
  // next and clears the others; mask holds (n_vocab + 31) / 32 words. When
  // the grammar is complete, only the end-of-generation tokens are allowed.
  virtual void fill_mask(std::span<uint32_t> mask) = 0;
  // Advances past a sampled token; false when the grammar does not allow it.
  virtual bool accept(int32_t token) = 0;
  // An end-of-generation token was accepted: nothing more may follow.
  virtual bool terminated() const = 0;
};

// A compiled grammar, shared by every request that uses it (and their n
// choices); each request takes a matcher of its own.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  virtual std::unique_ptr<TokenMatcher> matcher() const = 0;
};

}  // namespace agentkv
