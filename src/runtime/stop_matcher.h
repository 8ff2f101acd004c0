// Finds stop strings in streamed text (OpenAI "stop"): the stop string and
// everything after it are never emitted.
//
// push() returns what is safe to emit now and holds back a tail that could
// still grow into a stop string, plus any incomplete UTF-8 sequence at the end,
// so an emitted chunk never splits a character (tokens can end mid-character).
// When several stops match, the one that completes first wins (then the one
// that starts first), so the output does not depend on how the text was split
// into pieces.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace agentkv {

class StopMatcher {
 public:
  // Empty strings in `stops` are ignored.
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends `text`; returns the newly safe text. After a stop it returns "".
  std::string push(std::string_view text);

  // End of stream: returns whatever is still held back ("" after a stop).
  std::string flush();

  // True once a stop string has completed.
  bool stopped() const { return stopped_; }

 private:
  // Length of the longest suffix of pending_ that a stop string starts with
  // (shorter than that stop), or that is an unfinished UTF-8 character.
  size_t held_tail() const;

  std::vector<std::string> stops_;
  std::string pending_;  // text received but not yet emitted
  bool stopped_ = false;
};

}  // namespace agentkv
