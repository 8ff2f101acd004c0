// A request's output (token_output.h).
#include "runtime/token_output.h"

#include <algorithm>

namespace agentkv {

TokenOutput::TokenOutput(const ServeRequest& r, const Tokenizer& tok, std::vector<int32_t> forced)
    : sampler_(r.sampling),
      stops_(r.stop),
      detok_(tok),
      max_tokens_(r.max_tokens),
      ignore_eos_(r.ignore_eos),
      stop_token_ids_(r.stop_token_ids),
      forced_(std::move(forced)) {
  if (r.constraint) matcher_ = r.constraint->matcher();
  sampler_.set_prompt(r.prompt);  // the repetition penalty covers the prompt
}

void TokenOutput::fill_mask(size_t words) {
  mask_.resize(words);
  matcher_->fill_mask(mask_);
  mask_ready_ = true;
}

ServeFinish TokenOutput::next(std::span<const float> logits, const Tokenizer& tok, int64_t n_tokens,
                              int32_t max_model_len, ServeEvent* ev) {
  const bool forced = forced_next();
  const bool constrained = constrained_next();
  if (constrained && !mask_ready_) fill_mask((logits.size() + 31) / 32);  // not planned as a sampled row
  SampleResult sr = forced ? logprobs_of(logits, forced_[n_generated_], sampler_.params().n_logprobs)
                           : sampler_.sample(logits, constrained ? mask_.data() : nullptr);
  if (constrained) {
    mask_ready_ = false;
    if (sr.id < 0 || ((mask_[static_cast<size_t>(sr.id) >> 5] >> (sr.id & 31)) & 1u) == 0) {
      ev->error = "the grammar allows no next token";
      return ServeFinish::kError;
    }
  }
  const bool stop_id =
      std::find(stop_token_ids_.begin(), stop_token_ids_.end(), sr.id) != stop_token_ids_.end();
  // Under a grammar an end-of-generation token is the grammar's own end
  // (the mask allows it only there), so it ends the request even with ignore_eos.
  if (stop_id || ((!ignore_eos_ || constrained) && tok.is_eog(sr.id))) return ServeFinish::kStop;
  if (constrained && !matcher_->accept(sr.id)) {
    ev->error = "the grammar refused the sampled token";
    return ServeFinish::kError;
  }
  ++n_generated_;
  const int32_t token = sr.id;
  sampler_.accept(token);
  ev->samples.push_back(std::move(sr));
  ev->text = stops_.push(detok_.push(token));
  if (stops_.stopped()) return ServeFinish::kStop;
  // prompt + completion (this token included) has reached max_model_len.
  if (n_generated_ >= max_tokens_ || n_tokens + 1 >= max_model_len) return ServeFinish::kLength;
  return ServeFinish::kNone;
}

std::string TokenOutput::flush(ServeFinish why) {
  if (why == ServeFinish::kError || why == ServeFinish::kCancelled || stops_.stopped()) return "";
  return stops_.push(detok_.flush()) + stops_.flush();
}

}  // namespace agentkv
