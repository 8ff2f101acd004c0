#include "tokenizer/pretokenize.h"

#include <array>
#include <string>

#include "tokenizer/unicode.h"

namespace agentkv {

Result<PreTokenizerKind> pre_tokenizer_from_name(std::string_view pre) {
  // Aliases follow llama.cpp's grouping of tokenizer.ggml.pre values by regex.
  static constexpr std::array<std::string_view, 4> kGpt2 = {"gpt2", "gpt-2", "default", ""};
  static constexpr std::array<std::string_view, 7> kSmollm = {"smollm",    "starcoder", "refact", "command-r",
                                                              "codeshell", "exaone",    "minerva"};
  static constexpr std::array<std::string_view, 7> kLlama3 = {"llama-bpe", "llama3",    "falcon3", "pixtral",
                                                              "dbrx",      "smaug-bpe", "lfm2"};
  static constexpr std::array<std::string_view, 3> kQwen2 = {"qwen2", "deepseek-r1-qwen", "megrez"};
  for (auto n : kGpt2)
    if (pre == n) return PreTokenizerKind::kGpt2;
  for (auto n : kSmollm)
    if (pre == n) return PreTokenizerKind::kSmollm;
  for (auto n : kLlama3)
    if (pre == n) return PreTokenizerKind::kLlama3;
  for (auto n : kQwen2)
    if (pre == n) return PreTokenizerKind::kQwen2;
  return make_error(ErrorCode::kUnsupported, "unsupported pre-tokenizer '", pre,
                    "' (supported: gpt2, default, smollm, llama-bpe, qwen2 and their aliases)");
}

namespace {

// The text as code points with their classes, plus byte offsets.
struct CpText {
  std::vector<uint32_t> cp;
  std::vector<CpClass> cls;
  std::vector<size_t> off;  // byte offset of cp[i]; off[n] = text size

  explicit CpText(std::string_view s) {
    cp.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
      Utf8Char ch = utf8_decode(s, i);
      cp.push_back(ch.cp);
      // An invalid byte decodes as U+FFFD, which is class "other" as it should be.
      cls.push_back(cp_class(ch.cp));
      off.push_back(i);
      i += ch.len;
    }
    off.push_back(s.size());
  }
  size_t size() const { return cp.size(); }
};

bool is_nl(uint32_t c) { return c == '\r' || c == '\n'; }

// Length of the run of class `c` starting at i.
size_t run(const CpText& t, size_t i, CpClass c) {
  size_t j = i;
  while (j < t.size() && t.cls[j] == c) ++j;
  return j - i;
}

// Lower-cases the ASCII letters of the contractions; U+017F (long s) folds to
// 's' under Unicode case folding, which (?i:...) in Oniguruma applies.
uint32_t fold(uint32_t c, bool ignore_case) {
  if (!ignore_case) return c;
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c == 0x17F) return 's';
  return c;
}

// 's|'t|'re|'ve|'m|'ll|'d (optionally case-insensitive): match length or 0.
size_t contraction(const CpText& t, size_t i, bool ignore_case) {
  if (t.cp[i] != '\'' || i + 1 >= t.size()) return 0;
  const uint32_t a = fold(t.cp[i + 1], ignore_case);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= t.size()) return 0;
  const uint32_t b = fold(t.cp[i + 2], ignore_case);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// \s+(?!\S) then \s+, at a whitespace character.
size_t trailing_space(const CpText& t, size_t i) {
  const size_t n = run(t, i, CpClass::kSpace);
  if (i + n == t.size() || n == 1) return n;  // at the end, or the \s+ fallback for a single space
  return n - 1;                               // leave the last space to prefix the next word
}

size_t match_gpt2(const CpText& t, size_t i) {
  if (size_t m = contraction(t, i, false)) return m;
  const bool sp = t.cp[i] == ' ' && i + 1 < t.size();
  // ` ?X+` for X in {letter, number, other}: the optional space then a run.
  for (CpClass c : {CpClass::kLetter, CpClass::kNumber, CpClass::kOther}) {
    if (sp && t.cls[i + 1] == c) return 1 + run(t, i + 1, c);
    if (t.cls[i] == c) return run(t, i, c);
  }
  return trailing_space(t, i);
}

size_t match_llama3(const CpText& t, size_t i, bool qwen) {
  if (size_t m = contraction(t, i, true)) return m;
  const CpClass c0 = t.cls[i];
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (c0 == CpClass::kLetter) return run(t, i, CpClass::kLetter);
  if (c0 != CpClass::kNumber && !is_nl(t.cp[i]) && i + 1 < t.size() && t.cls[i + 1] == CpClass::kLetter)
    return 1 + run(t, i + 1, CpClass::kLetter);
  // \p{N}{1,3} (Qwen2: \p{N})
  if (c0 == CpClass::kNumber) {
    const size_t n = run(t, i, CpClass::kNumber);
    return qwen ? 1 : (n < 3 ? n : 3);
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  size_t j = i;
  if (t.cp[j] == ' ' && j + 1 < t.size() && t.cls[j + 1] == CpClass::kOther) ++j;
  if (t.cls[j] == CpClass::kOther) {
    j += run(t, j, CpClass::kOther);
    while (j < t.size() && is_nl(t.cp[j])) ++j;
    return j - i;
  }
  // \s*[\r\n]+ : up to and including the last newline of the whitespace run.
  const size_t n = run(t, i, CpClass::kSpace);
  for (size_t k = i + n; k > i; --k) {
    if (is_nl(t.cp[k - 1])) return k - i;
  }
  return trailing_space(t, i);
}

// Every \p{N} code point alone, everything else in maximal runs (HF's
// Digits(individual_digits=True) tests Rust's char::is_numeric: Nd, Nl, No).
void split_digits(std::string_view text, std::vector<std::string_view>& out) {
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    const Utf8Char ch = utf8_decode(text, i);
    if (cp_class(ch.cp) == CpClass::kNumber) {
      if (i > start) out.push_back(text.substr(start, i - start));
      out.push_back(text.substr(i, ch.len));
      start = i + ch.len;
    }
    i += ch.len;
  }
  if (start < text.size()) out.push_back(text.substr(start));
}

void split_regex(PreTokenizerKind kind, std::string_view text, std::vector<std::string_view>& out) {
  const CpText t(text);
  for (size_t i = 0; i < t.size();) {
    size_t n = 0;
    switch (kind) {
      case PreTokenizerKind::kGpt2:
      case PreTokenizerKind::kSmollm:
        n = match_gpt2(t, i);
        break;
      case PreTokenizerKind::kLlama3:
        n = match_llama3(t, i, false);
        break;
      case PreTokenizerKind::kQwen2:
        n = match_llama3(t, i, true);
        break;
    }
    if (n == 0) n = 1;  // unreachable (every class has an alternative); guarantees progress
    out.push_back(text.substr(t.off[i], t.off[i + n] - t.off[i]));
    i += n;
  }
}

}  // namespace

std::vector<std::string_view> pretokenize(PreTokenizerKind kind, std::string_view text) {
  std::vector<std::string_view> out;
  if (kind == PreTokenizerKind::kSmollm) {
    std::vector<std::string_view> parts;
    split_digits(text, parts);
    for (std::string_view p : parts) split_regex(kind, p, out);
  } else {
    split_regex(kind, text, out);
  }
  return out;
}

}  // namespace agentkv
