// Tokenizer construction, special-token splitting, decoding.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace agentkv {

namespace {

// GPT-2's reversible byte -> code point map: printable Latin-1 bytes map to
// themselves, the rest to U+0100.. in byte order, so no token has spaces or
// control characters.
std::array<uint32_t, 256> gpt2_byte_to_cp() {
  std::array<uint32_t, 256> m{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    m[b] = printable ? b : next++;
  }
  return m;
}

// Token text -> raw bytes for a byte-level BPE token. Code points outside the
// byte map (never produced by a well-formed vocabulary) are kept as UTF-8.
std::string bpe_token_bytes(std::string_view text, const std::unordered_map<uint32_t, uint8_t>& cp_to_byte) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    Utf8Char ch = utf8_decode(text, i);
    auto it = cp_to_byte.find(ch.cp);
    if (it != cp_to_byte.end() && !(ch.cp == 0xFFFD && ch.len == 1)) {
      out += static_cast<char>(it->second);
    } else {
      out.append(text.substr(i, ch.len));
    }
    i += ch.len;
  }
  return out;
}

// "<0xAB>" -> 0xAB, or -1.
int parse_byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int v = 0;
  for (char c : t.substr(3, 2)) {
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= c - '0';
    else if (c >= 'A' && c <= 'F')
      v |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f')
      v |= c - 'a' + 10;
    else
      return -1;
  }
  return v;
}

std::string spm_token_bytes(std::string_view text, int32_t type) {
  if (type == kTokenByte) {
    const int b = parse_byte_token(text);
    if (b >= 0) return std::string(1, static_cast<char>(b));
  }
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 3, "\xE2\x96\x81") == 0) {
      out += ' ';
      i += 3;
    } else {
      out += text[i++];
    }
  }
  return out;
}

Status check_id(const char* name, int32_t id, size_t n) {
  if (id < -1 || id >= static_cast<int64_t>(n)) {
    return make_error(ErrorCode::kOutOfRange, name, " id ", id, " is outside the vocabulary (", n,
                      " tokens)");
  }
  return Status::ok();
}

Status build_bpe(TokenizerImpl& t) {
  AKV_ASSIGN_OR_RETURN(t.pre, pre_tokenizer_from_name(t.vocab.pre));
  t.ignore_merges = t.pre == PreTokenizerKind::kLlama3;
  const auto b2c = gpt2_byte_to_cp();
  std::unordered_map<uint32_t, uint8_t> c2b;
  for (int b = 0; b < 256; ++b) {
    c2b[b2c[b]] = static_cast<uint8_t>(b);
    t.byte_char[b].clear();
    utf8_append(t.byte_char[b], b2c[b]);
    auto it = t.token_ids.find(t.byte_char[b]);
    t.byte_token[b] = it == t.token_ids.end() ? -1 : it->second;
  }
  const auto& types = t.vocab.types;
  for (size_t i = 0; i < t.vocab.tokens.size(); ++i) {
    const int32_t type = types.empty() ? kTokenNormal : types[i];
    const bool verbatim = type == kTokenControl || type == kTokenUserDefined || type == kTokenUnknown;
    t.pieces[i] = verbatim ? t.vocab.tokens[i] : bpe_token_bytes(t.vocab.tokens[i], c2b);
  }
  t.merges.reserve(t.vocab.merges.size());
  for (size_t r = 0; r < t.vocab.merges.size(); ++r) {
    const std::string& m = t.vocab.merges[r];
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos) return make_error(ErrorCode::kParse, "merge ", r, " '", m, "' has no space");
    const std::string_view a = std::string_view(m).substr(0, sp), b = std::string_view(m).substr(sp + 1);
    auto ia = t.token_ids.find(a), ib = t.token_ids.find(b);
    auto ic = t.token_ids.find(std::string(a) + std::string(b));
    if (ia == t.token_ids.end() || ib == t.token_ids.end() || ic == t.token_ids.end()) {
      return make_error(ErrorCode::kParse, "merge ", r, " '", m,
                        "' names a token that is not in the vocabulary");
    }
    t.merges.try_emplace(merge_key(ia->second, ib->second), MergeInfo{static_cast<int32_t>(r), ic->second});
  }
  return Status::ok();
}

Status build_spm(TokenizerImpl& t) {
  if (t.vocab.scores.size() != t.vocab.tokens.size()) {
    return make_error(ErrorCode::kParse, "SentencePiece vocabulary needs one score per token");
  }
  t.byte_token.fill(-1);
  const auto& types = t.vocab.types;
  for (size_t i = 0; i < t.vocab.tokens.size(); ++i) {
    const int32_t type = types.empty() ? kTokenNormal : types[i];
    const std::string& text = t.vocab.tokens[i];
    t.pieces[i] = (type == kTokenControl || type == kTokenUnknown) ? text : spm_token_bytes(text, type);
    const int b = parse_byte_token(text);
    if (type == kTokenByte && b >= 0 && t.byte_token[b] < 0) t.byte_token[b] = static_cast<int32_t>(i);
    if (type == kTokenNormal || type == kTokenUserDefined || type == kTokenUndefined) {
      t.spm_pieces.try_emplace(text, static_cast<int32_t>(i));
    }
  }
  return Status::ok();
}

// Tokens that end a turn, by the names model families use (llama.cpp's list).
bool is_eog_name(std::string_view s) {
  for (std::string_view n : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                             "<|eom_id|>", "<EOT>", "</s>", "<|end_of_text|>"}) {
    if (s == n) return true;
  }
  return false;
}

}  // namespace

Result<Tokenizer> Tokenizer::create(Vocab vocab) {
  auto t = std::make_shared<TokenizerImpl>();
  const size_t n = vocab.tokens.size();
  if (n == 0) return make_error(ErrorCode::kInvalidArgument, "empty vocabulary");
  if (!vocab.types.empty() && vocab.types.size() != n) {
    return make_error(ErrorCode::kInvalidArgument, "token types (", vocab.types.size(), ") and tokens (", n,
                      ") disagree in length");
  }
  if (!vocab.scores.empty() && vocab.scores.size() != n) {
    return make_error(ErrorCode::kInvalidArgument, "scores (", vocab.scores.size(), ") and tokens (", n,
                      ") disagree in length");
  }
  AKV_RETURN_IF_ERROR(check_id("bos", vocab.bos_id, n));
  AKV_RETURN_IF_ERROR(check_id("eos", vocab.eos_id, n));
  AKV_RETURN_IF_ERROR(check_id("unk", vocab.unk_id, n));
  AKV_RETURN_IF_ERROR(check_id("pad", vocab.pad_id, n));
  AKV_RETURN_IF_ERROR(check_id("eot", vocab.eot_id, n));
  t->vocab = std::move(vocab);
  const Vocab& v = t->vocab;
  t->token_ids.reserve(n);
  for (size_t i = 0; i < n; ++i) t->token_ids.try_emplace(v.tokens[i], static_cast<int32_t>(i));
  t->pieces.resize(n);
  AKV_RETURN_IF_ERROR(v.kind == Vocab::Kind::kBpe ? build_bpe(*t) : build_spm(*t));

  t->is_control.assign(n, 0);
  t->is_eog.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const int32_t type = v.types.empty() ? kTokenNormal : v.types[i];
    const bool special = type == kTokenControl || type == kTokenUnknown || type == kTokenUserDefined;
    t->is_control[i] = type == kTokenControl || type == kTokenUnknown;
    if (special && !v.tokens[i].empty()) {
      t->specials[static_cast<unsigned char>(v.tokens[i][0])].push_back(
          {static_cast<int32_t>(i), type == kTokenUserDefined});
    }
    if (type == kTokenControl && is_eog_name(v.tokens[i])) t->is_eog[i] = 1;
  }
  for (auto& bucket : t->specials) {
    std::stable_sort(bucket.begin(), bucket.end(), [&](const auto& a, const auto& b) {
      return v.tokens[a.id].size() > v.tokens[b.id].size();
    });
  }
  if (t->vocab.eot_id < 0) {
    for (std::string_view name : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>"}) {
      auto it = t->token_ids.find(name);
      if (it != t->token_ids.end() && t->is_control[it->second]) {
        t->vocab.eot_id = it->second;
        break;
      }
    }
  }
  if (t->vocab.eos_id >= 0) t->is_eog[t->vocab.eos_id] = 1;
  if (t->vocab.eot_id >= 0) t->is_eog[t->vocab.eot_id] = 1;
  return Tokenizer(std::move(t));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  return encode_spans(text, add_special, parse_special, {});
}

std::vector<int32_t> Tokenizer::encode_marked(std::string_view text, std::span<const TextSpan> input_spans,
                                              bool add_special) const {
  return encode_spans(text, add_special, /*parse_special=*/true, input_spans);
}

std::vector<int32_t> Tokenizer::encode_spans(std::string_view text, bool add_special, bool parse_special,
                                             std::span<const TextSpan> no_special) const {
  const TokenizerImpl& t = *impl_;
  const Vocab& v = t.vocab;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && v.add_bos && v.bos_id >= 0) out.push_back(v.bos_id);
  bool prev_special = true;  // SentencePiece prefixes a space to text at the start and after a special token
  auto encode_text = [&](std::string_view frag) {
    if (frag.empty()) return;
    if (v.kind == Vocab::Kind::kBpe) {
      for (std::string_view piece : pretokenize(t.pre, frag)) t.bpe_encode(piece, out);
    } else {
      t.spm_encode(frag, v.add_space_prefix && prev_special, out);
    }
    prev_special = false;
  };
  size_t start = 0;
  size_t span = 0;  // the first of no_special that ends after i
  for (size_t i = 0; i < text.size();) {
    while (span < no_special.size() && no_special[span].end <= i) ++span;
    int32_t found = -1;
    for (const auto& s : t.specials[static_cast<unsigned char>(text[i])]) {
      const std::string& tok = v.tokens[s.id];
      if (!s.always && (!parse_special || (span < no_special.size() && no_special[span].begin < i + tok.size())))
        continue;
      if (text.compare(i, tok.size(), tok) == 0) {
        found = s.id;
        break;
      }
    }
    if (found < 0) {
      ++i;
      continue;
    }
    encode_text(text.substr(start, i - start));
    out.push_back(found);
    prev_special = true;
    i += v.tokens[found].size();
    start = i;
  }
  encode_text(text.substr(start));
  if (add_special && v.add_eos && v.eos_id >= 0) out.push_back(v.eos_id);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  const TokenizerImpl& t = *impl_;
  const bool strip_first_space = t.vocab.kind == Vocab::Kind::kSpm && t.vocab.add_space_prefix;
  std::string out;
  bool seen_text = false;
  for (int32_t id : ids) {
    if (id < 0 || id >= n_vocab()) continue;
    if (t.is_control[id]) {
      if (!skip_special) out += t.pieces[id];
      continue;
    }
    std::string_view piece = t.pieces[id];
    // Undo the space SentencePiece encoding prefixed to the text.
    if (!seen_text && strip_first_space && !piece.empty() && piece[0] == ' ') piece.remove_prefix(1);
    seen_text = true;
    out += piece;
  }
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return {};
  return impl_->pieces[id];
}

int32_t Tokenizer::n_vocab() const { return static_cast<int32_t>(impl_->vocab.tokens.size()); }
const Vocab& Tokenizer::vocab() const { return impl_->vocab; }
bool Tokenizer::is_eog(int32_t id) const { return id >= 0 && id < n_vocab() && impl_->is_eog[id]; }
bool Tokenizer::is_control(int32_t id) const { return id >= 0 && id < n_vocab() && impl_->is_control[id]; }

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  auto it = impl_->token_ids.find(text);
  if (it == impl_->token_ids.end()) return std::nullopt;
  return it->second;
}

}  // namespace agentkv
