// UTF-8 decoding and the code point classes the pre-tokenizer regexes use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace agentkv {

// \p{L}, \p{N}, \s (White_Space), or anything else. No code point is in two
// classes, so one lookup answers every regex character class we need.
enum class CpClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

CpClass cp_class(uint32_t cp);

// Decodes one code point at s[i]. Invalid or truncated sequences decode as
// one byte each (len = 1) with cp = 0xFFFD, so every byte is consumed exactly
// once and the pieces always concatenate back to the input.
struct Utf8Char {
  uint32_t cp;
  uint32_t len;
};
Utf8Char utf8_decode(std::string_view s, size_t i);

void utf8_append(std::string& out, uint32_t cp);

// Length of the longest prefix of s made of complete UTF-8 sequences, where
// an invalid byte counts as complete (it never will be) and only a truncated
// but so far valid sequence at the end is held back.
size_t utf8_complete_prefix(std::string_view s);

// True when s is valid UTF-8 (no surrogates, no overlong forms).
bool utf8_is_valid(std::string_view s);

namespace unicode_internal {
struct CpRange {
  uint32_t lo, hi;
  CpClass cls;
};
extern const CpRange kCpRanges[];
extern const size_t kCpRangeCount;
}  // namespace unicode_internal

}  // namespace agentkv
