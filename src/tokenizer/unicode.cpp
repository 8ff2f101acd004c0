#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace agentkv {

namespace {
using unicode_internal::CpRange;

std::array<CpClass, 128> make_ascii_table() {
  std::array<CpClass, 128> t{};
  for (uint32_t c = 0; c < 128; ++c) {
    const CpRange* end = unicode_internal::kCpRanges + unicode_internal::kCpRangeCount;
    const CpRange* r = std::upper_bound(unicode_internal::kCpRanges, end, c,
                                        [](uint32_t v, const CpRange& x) { return v < x.lo; });
    t[c] = (r != unicode_internal::kCpRanges && c <= (r - 1)->hi) ? (r - 1)->cls : CpClass::kOther;
  }
  return t;
}
}  // namespace

CpClass cp_class(uint32_t cp) {
  static const std::array<CpClass, 128> kAscii = make_ascii_table();
  if (cp < 128) return kAscii[cp];
  const CpRange* begin = unicode_internal::kCpRanges;
  const CpRange* end = begin + unicode_internal::kCpRangeCount;
  const CpRange* r = std::upper_bound(begin, end, cp, [](uint32_t v, const CpRange& x) { return v < x.lo; });
  if (r == begin) return CpClass::kOther;
  --r;
  return cp <= r->hi ? r->cls : CpClass::kOther;
}

Utf8Char utf8_decode(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = b(i);
  if (c < 0x80) return {c, 1};
  uint32_t len = 0, cp = 0, min = 0;
  if ((c & 0xE0) == 0xC0) {
    len = 2, cp = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3, cp = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4, cp = c & 0x07, min = 0x10000;
  } else {
    return {0xFFFD, 1};
  }
  if (i + len > s.size()) return {0xFFFD, 1};
  for (uint32_t k = 1; k < len; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return {0xFFFD, 1};
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {0xFFFD, 1};
  return {cp, len};
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

size_t utf8_complete_prefix(std::string_view s) {
  // Only the last (at most 3) bytes can be the start of an unfinished sequence.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const uint8_t c = static_cast<uint8_t>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    uint32_t need = 0;
    if ((c & 0xE0) == 0xC0)
      need = 2;
    else if ((c & 0xF0) == 0xE0)
      need = 3;
    else if ((c & 0xF8) == 0xF0)
      need = 4;
    if (need > back) {
      // Truncated; hold it back only if what we have so far could still become valid.
      std::string_view tail = s.substr(n - back);
      std::string padded(tail);
      // Complete with the smallest continuation bytes that keep the prefix plausible.
      while (padded.size() < need) padded += static_cast<char>(0xBF);
      if (utf8_decode(padded, 0).len == need) return n - back;
      // Some valid lead bytes only accept small continuations (E0 A0.., F0 90.., ED ..9F, F4 ..8F).
      padded = std::string(tail);
      while (padded.size() < need) padded += static_cast<char>(0x80);
      if (utf8_decode(padded, 0).len == need) return n - back;
    }
    return n;
  }
  return n;
}

bool utf8_is_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    Utf8Char ch = utf8_decode(s, i);
    if (ch.cp == 0xFFFD && ch.len == 1 && static_cast<uint8_t>(s[i]) >= 0x80) return false;
    i += ch.len;
  }
  return true;
}

}  // namespace agentkv
