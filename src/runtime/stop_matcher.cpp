#include "runtime/stop_matcher.h"

#include <algorithm>

namespace agentkv {
namespace {

// Bytes an unfinished UTF-8 character occupies at the end of `s`, or 0 when
// `s` ends on a character boundary (or with bytes that are not valid UTF-8,
// which waiting would not fix).
size_t incomplete_utf8_tail(std::string_view s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
    const auto b = static_cast<unsigned char>(s[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: look further back
    size_t need = 0;
    if ((b & 0xE0) == 0xC0) {
      need = 2;
    } else if ((b & 0xF0) == 0xE0) {
      need = 3;
    } else if ((b & 0xF8) == 0xF0) {
      need = 4;
    }
    return need > back ? back : 0;  // ASCII or an invalid lead byte gives need = 0
  }
  return 0;
}

}  // namespace

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

size_t StopMatcher::held_tail() const {
  const std::string_view p = pending_;
  size_t hold = incomplete_utf8_tail(p);
  for (const auto& stop : stops_) {
    // Longest k < |stop| with suffix(p, k) == prefix(stop, k); stops are short.
    for (size_t k = std::min(stop.size() - 1, p.size()); k > hold; --k) {
      if (p.substr(p.size() - k) == std::string_view(stop).substr(0, k)) {
        hold = k;
        break;
      }
    }
  }
  return hold;
}

std::string StopMatcher::push(std::string_view text) {
  if (stopped_) return {};
  // Only the held tail is old, and it held no complete stop, so any match
  // found now ends inside the new text.
  pending_.append(text);
  size_t best_end = std::string::npos;
  size_t best_pos = std::string::npos;
  for (const auto& stop : stops_) {
    const size_t pos = pending_.find(stop);
    if (pos == std::string::npos) continue;
    const size_t end = pos + stop.size();
    if (end < best_end || (end == best_end && pos < best_pos)) {
      best_end = end;
      best_pos = pos;
    }
  }
  std::string out;
  if (best_pos != std::string::npos) {
    stopped_ = true;
    out = pending_.substr(0, best_pos);
    pending_.clear();
    return out;
  }
  const size_t keep = held_tail();
  out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  if (stopped_) return {};
  std::string out = std::move(pending_);
  pending_.clear();
  return out;
}

}  // namespace agentkv
