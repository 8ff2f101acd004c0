// StreamDecoder: emits text only once its UTF-8 sequences are complete, so a
// character split over two tokens (common for CJK and emoji) is never sent
// in halves.
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace agentkv {

namespace {
// Copies s, replacing each byte that is not part of a valid sequence by U+FFFD.
std::string sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    Utf8Char ch = utf8_decode(s, i);
    if (ch.len == 1 && static_cast<uint8_t>(s[i]) >= 0x80) {
      utf8_append(out, 0xFFFD);
    } else {
      out.append(s.substr(i, ch.len));
    }
    i += ch.len;
  }
  return out;
}
}  // namespace

std::string StreamDecoder::push(int32_t id) {
  if (id < 0 || id >= tok_->n_vocab() || tok_->is_control(id)) return {};
  // decode() of one token applies the SentencePiece leading-space rule; only
  // the first text token of the stream may have its space removed.
  std::string piece = first_text_ ? tok_->decode(std::span<const int32_t>(&id, 1)) : tok_->token_to_piece(id);
  first_text_ = false;
  pending_ += piece;
  const size_t n = utf8_complete_prefix(pending_);
  std::string out = sanitize(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace agentkv
