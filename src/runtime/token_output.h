// A request's output, vLLM's output processing for one request: each logits
// row it samples from becomes its next token, under its sampling
// parameters, its grammar (the mask of the tokens allowed next), the forced
// tokens of a benchmark, its stop ids and end-of-generation, its token
// limit and the context's; and the token becomes streamed text, held back
// while it may be the start of a stop string. Engine thread only, but for
// fill_mask, which the mask worker runs while the engine waits for it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "agentkv/constraint.h"
#include "agentkv/serving.h"
#include "runtime/sampler.h"
#include "runtime/stop_matcher.h"
#include "tokenizer/tokenizer.h"

namespace agentkv {

class TokenOutput {
 public:
  // forced: the tokens a benchmark forces first (teacher forcing), or none.
  TokenOutput(const ServeRequest& r, const Tokenizer& tok, std::vector<int32_t> forced);

  // One logits row: samples the next token into ev (samples, text). Returns
  // why the request ends (an error's reason in ev->error), or kNone when it
  // goes on with the token. n_tokens: the request's tokens so far (prompt
  // and generated), against max_model_len.
  ServeFinish next(std::span<const float> logits, const Tokenizer& tok, int64_t n_tokens,
                   int32_t max_model_len, ServeEvent* ev);
  // At the finish: the text held back (a partial stop string, undecoded
  // bytes), unless the request ended on a stop string or an error.
  std::string flush(ServeFinish why);

  // Whether the next token is sampled under a grammar (so a mask is needed).
  bool constrained_next() const { return matcher_ && !forced_next(); }
  // The grammar's mask of the next token (words = ceil(n_vocab / 32)).
  void fill_mask(size_t words);
  int32_t n_generated() const { return n_generated_; }

 private:
  bool forced_next() const { return static_cast<size_t>(n_generated_) < forced_.size(); }

  Sampler sampler_;
  StopMatcher stops_;
  StreamDecoder detok_;
  int32_t max_tokens_ = 0;
  bool ignore_eos_ = false;
  std::vector<int32_t> stop_token_ids_;
  std::vector<int32_t> forced_;
  std::unique_ptr<TokenMatcher> matcher_;
  std::vector<uint32_t> mask_;
  bool mask_ready_ = false;
  int32_t n_generated_ = 0;
};

}  // namespace agentkv
