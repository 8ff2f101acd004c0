#include "runtime/stop_matcher.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace agentkv {
namespace {

struct Streamed {
  std::vector<std::string> chunks;  // what each push returned
  std::string text;                 // everything emitted, flush included
  bool stopped = false;
};

Streamed stream(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
  StopMatcher m(stops);
  Streamed s;
  for (const auto& p : pieces) {
    s.chunks.push_back(m.push(p));
    s.text += s.chunks.back();
  }
  s.text += m.flush();
  s.stopped = m.stopped();
  return s;
}

// The definition, written the slow way: the stop that ends first in the whole
// text (the longest of those ending there) cuts the text where it starts.
std::string reference_cut(const std::vector<std::string>& stops, const std::string& text, bool* stopped) {
  for (size_t end = 1; end <= text.size(); ++end) {
    size_t best_start = std::string::npos;
    for (const auto& s : stops) {
      if (s.empty() || s.size() > end) continue;
      if (text.compare(end - s.size(), s.size(), s) == 0) best_start = std::min(best_start, end - s.size());
    }
    if (best_start != std::string::npos) {
      *stopped = true;
      return text.substr(0, best_start);
    }
  }
  *stopped = false;
  return text;
}

bool is_whole_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += len;
  }
  return true;
}

TEST(StopMatcher, NoStopsPassesTextThrough) {
  auto s = stream({}, {"Hello", ", ", "world"});
  EXPECT_EQ(s.chunks, (std::vector<std::string>{"Hello", ", ", "world"}));
  EXPECT_EQ(s.text, "Hello, world");
  EXPECT_FALSE(s.stopped);
  auto e = stream({""}, {"a", "b"});  // an empty stop string matches nothing
  EXPECT_EQ(e.text, "ab");
  EXPECT_FALSE(e.stopped);
}

TEST(StopMatcher, StopSplitAcrossPushes) {
  auto s = stream({"END"}, {"Hello E", "N", "D and more"});
  EXPECT_EQ(s.chunks, (std::vector<std::string>{"Hello ", "", ""}));
  EXPECT_EQ(s.text, "Hello ");
  EXPECT_TRUE(s.stopped);
}

TEST(StopMatcher, HeldPrefixIsReleasedWhenItDiverges) {
  auto s = stream({"abc"}, {"xab", "d", "ab"});
  EXPECT_EQ(s.chunks, (std::vector<std::string>{"x", "abd", ""}));
  EXPECT_EQ(s.text, "xabdab");  // the last "ab" comes out of flush
  EXPECT_FALSE(s.stopped);
}

TEST(StopMatcher, OverlappingPrefix) {
  auto s = stream({"ab"}, {"a", "a", "b", "c"});
  EXPECT_EQ(s.chunks, (std::vector<std::string>{"", "a", "", ""}));
  EXPECT_EQ(s.text, "a");
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(stream({"aab"}, {"a", "a", "a", "b"}).text, "a");
  EXPECT_EQ(stream({"abab"}, {"ababab"}).text, "");
  EXPECT_EQ(stream({"abac"}, {"aba", "bac"}).text, "ab");
}

TEST(StopMatcher, FirstCompletedStopWins) {
  EXPECT_EQ(stream({"world", "lo w"}, {"hello world"}).text, "hel");
  EXPECT_EQ(stream({"world", "lo w"}, {"hel", "lo", " wor", "ld"}).text, "hel");
  // "bc" completes before "abcd" does, whether it arrives in one piece or not.
  EXPECT_EQ(stream({"abcd", "bc"}, {"xabcd"}).text, "xa");
  EXPECT_EQ(stream({"abcd", "bc"}, {"x", "a", "b", "c", "d"}).text, "xa");
  // Same end: the longer (earlier-starting) one.
  EXPECT_EQ(stream({"c", "abc"}, {"xabc"}).text, "x");
  EXPECT_EQ(stream({"\n\n", "User:"}, {"Sure.\n", "\nUser: hi"}).text, "Sure.");
}

TEST(StopMatcher, StopAtStartAndNothingAfterStop) {
  StopMatcher m({"<|im_end|>"});
  EXPECT_EQ(m.push("<|im_"), "");
  EXPECT_EQ(m.push("end|>tail"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("more"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, Utf8PiecesAreNeverSplit) {
  // A 4-byte emoji arriving one byte per token.
  const std::string smile = "\xF0\x9F\x98\x80";
  auto s =
      stream({}, {"a", smile.substr(0, 1), smile.substr(1, 1), smile.substr(2, 1), smile.substr(3, 1), "b"});
  EXPECT_EQ(s.chunks, (std::vector<std::string>{"a", "", "", "", smile, "b"}));
  // A stop that is one 2-byte character, split between pushes.
  EXPECT_EQ(stream({"\xC3\xA9"}, {"caf", "\xC3", "\xA9", "!"}).text, "caf");
  // Same lead byte, different character: released once it is whole.
  auto o = stream({"\xC3\xBC"}, {"sch", "\xC3", "\xB6", "n"});
  EXPECT_EQ(o.chunks, (std::vector<std::string>{"sch", "", "\xC3\xB6", "n"}));
  EXPECT_FALSE(o.stopped);
  // A stop made of multibyte characters, split mid-character.
  EXPECT_EQ(stream({"\xE6\x97\xA5\xE6\x9C\xAC"}, {"x\xE6\x97", "\xA5\xE6", "\x9C\xAC", "y"}).text, "x");
  // An unfinished character at the very end still comes out of flush.
  auto t = stream({}, {"ok\xE6\x97"});
  EXPECT_EQ(t.chunks, (std::vector<std::string>{"ok"}));
  EXPECT_EQ(t.text, "ok\xE6\x97");
  // Stray continuation bytes are not valid UTF-8; holding them would not help.
  EXPECT_EQ(stream({}, {"a\x80"}).chunks, (std::vector<std::string>{"a\x80"}));
}

// Whatever the split, the output equals the slow definition on the whole text.
TEST(StopMatcher, AnySplitMatchesTheDefinition) {
  std::mt19937 rng(17);
  const std::vector<std::vector<std::string>> stop_sets = {{"ab"},     {"aab", "ba"}, {"abc", "bcb", "cc"},
                                                           {"abcabd"}, {"a", "bb"},   {}};
  const std::string alphabet = "abcd";
  for (int iter = 0; iter < 3000; ++iter) {
    const auto& stops = stop_sets[iter % stop_sets.size()];
    std::string text;
    const int len = rng() % 20;
    for (int i = 0; i < len; ++i) text += alphabet[rng() % alphabet.size()];
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size();) {
      const size_t n = std::min<size_t>(text.size() - i, rng() % 4);
      pieces.push_back(text.substr(i, n));  // empty pieces included
      i += n;
    }
    bool want_stopped = false;
    const std::string want = reference_cut(stops, text, &want_stopped);
    const auto got = stream(stops, pieces);
    ASSERT_EQ(got.text, want) << "text " << text;
    ASSERT_EQ(got.stopped, want_stopped) << "text " << text;
  }
}

TEST(StopMatcher, RandomMultibyteTextEmitsWholeCharacters) {
  std::mt19937 rng(5);
  const std::vector<std::string> chars = {"a",       " ", "\xC3\xA9", "\xE6\x97\xA5", "\xF0\x9F\x98\x80",
                                          "\xC3\xBC"};
  const std::vector<std::string> stops = {"\xC3\xA9\xC3\xA9", "\xE6\x97\xA5 a"};
  for (int iter = 0; iter < 1000; ++iter) {
    std::string text;
    const int len = rng() % 12;
    for (int i = 0; i < len; ++i) text += chars[rng() % chars.size()];
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size();) {
      const size_t n = std::min<size_t>(text.size() - i, 1 + rng() % 3);  // cuts inside characters
      pieces.push_back(text.substr(i, n));
      i += n;
    }
    const auto got = stream(stops, pieces);
    for (const auto& c : got.chunks) ASSERT_TRUE(is_whole_utf8(c)) << "text " << text;
    bool want_stopped = false;
    ASSERT_EQ(got.text, reference_cut(stops, text, &want_stopped));
    ASSERT_EQ(got.stopped, want_stopped);
  }
}

}  // namespace
}  // namespace agentkv
