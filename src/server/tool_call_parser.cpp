#include "server/tool_call_parser.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>

namespace agentkv::server {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxHeader = 1024;  // a call head longer than this is parsed whole

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t skip_ws(std::string_view s, size_t i) {
  while (i < s.size() && is_ws(s[i])) ++i;
  return i;
}

// The longest suffix of `s` that is a proper prefix of `tag`.
size_t partial_tag_len(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

enum class Head { kMatch, kPrefix, kNo };

// `{"name": "N", "arguments": ` (or "parameters"), whitespace anywhere JSON
// allows it, followed by the value's first character at `value`.
Head match_head(std::string_view s, std::string& name, size_t& value) {
  size_t i = 0;
  // 1: matched, 0: ran out (a prefix so far), -1: differs.
  const auto lit = [&](std::string_view w) {
    i = skip_ws(s, i);
    const size_t n = std::min(w.size(), s.size() - i);
    if (s.substr(i, n) != w.substr(0, n)) return -1;
    i += n;
    return n == w.size() ? 1 : 0;
  };
  int r;
  if ((r = lit("{")) != 1 || (r = lit("\"name\"")) != 1 || (r = lit(":")) != 1)
    return r ? Head::kNo : Head::kPrefix;
  i = skip_ws(s, i);
  if (i == s.size()) return Head::kPrefix;
  if (s[i] != '"') return Head::kNo;
  const size_t begin = i++;
  for (bool esc = false; i < s.size(); ++i) {
    if (esc) {
      esc = false;
    } else if (s[i] == '\\') {
      esc = true;
    } else if (s[i] == '"') {
      break;
    }
  }
  if (i == s.size()) return Head::kPrefix;
  json n = json::parse(s.substr(begin, ++i - begin), nullptr, /*allow_exceptions=*/false);
  if (!n.is_string() || n.get<std::string>().empty()) return Head::kNo;
  if ((r = lit(",")) != 1) return r ? Head::kNo : Head::kPrefix;
  i = skip_ws(s, i);
  const bool params = i + 1 < s.size() && s[i + 1] == 'p';  // Llama 3's key for the arguments
  if ((r = lit(params ? "\"parameters\"" : "\"arguments\"")) != 1 || (r = lit(":")) != 1) {
    return r ? Head::kNo : Head::kPrefix;
  }
  i = skip_ws(s, i);
  if (i == s.size()) return Head::kPrefix;
  name = n.get<std::string>();
  value = i;
  return Head::kMatch;
}

}  // namespace

ToolCallParser::ToolCallParser(ToolFormat format, std::vector<std::string> bare_triggers)
    : format_(format), syntax_(&tool_syntax(format)), bare_triggers_(std::move(bare_triggers)) {}

ToolCallParser::Out ToolCallParser::push(std::string_view text) {
  buf_ += text;
  Out out;
  for (bool more = true; more;) {
    switch (state_) {
      case State::kText:
        more = step_text(out);
        break;
      case State::kOpen:
        more = step_open(out);
        break;
      case State::kObject:
        more = step_object(out);
        break;
      case State::kAfter:
        more = step_after();
        break;
      default: {
        size_t k = 0;
        while (k < buf_.size() && state_ != State::kAfter && state_ != State::kText)
          step_char(buf_[k++], out);
        buf_.erase(0, k);
        more = !buf_.empty();
      }
    }
  }
  return out;
}

// Text up to the first trigger is content; a tail that may begin one is held.
bool ToolCallParser::step_text(Out& out) {
  size_t at = std::string::npos, len = 0;
  bool call = false;
  for (const std::string& t : syntax_->triggers) {
    const size_t p = buf_.find(t);
    if (p < at) at = p, len = t.size(), call = false;
  }
  if (!syntax_->call_trigger.empty()) {
    const size_t p = buf_.find(syntax_->call_trigger);
    if (p < at) at = p, len = 0, call = true;
  }
  for (const std::string& t : bare_triggers_) {
    const size_t p = buf_.find(t);
    if (p < at) at = p, len = 0, call = true;
  }
  if (at == std::string::npos) {
    size_t keep = 0;
    for (const std::string& t : syntax_->triggers) keep = std::max(keep, partial_tag_len(buf_, t));
    if (!syntax_->call_trigger.empty()) keep = std::max(keep, partial_tag_len(buf_, syntax_->call_trigger));
    for (const std::string& t : bare_triggers_) keep = std::max(keep, partial_tag_len(buf_, t));
    out.content += buf_.substr(0, buf_.size() - keep);
    buf_.erase(0, buf_.size() - keep);
    return false;
  }
  out.content += buf_.substr(0, at);
  raw_ = buf_.substr(at, len);
  buf_.erase(0, at + len);
  state_ = !call && !syntax_->section_open.empty() ? State::kOpen : State::kObject;
  return true;
}

// Mistral's "[" after [TOOL_CALLS].
bool ToolCallParser::step_open(Out& out) {
  const size_t i = skip_ws(buf_, 0);
  const std::string_view rest = std::string_view(buf_).substr(i);
  const std::string& open = syntax_->section_open;
  if (rest.size() < open.size() && open.starts_with(rest)) return false;
  if (!rest.starts_with(open)) {
    out.content += raw_;
    raw_.clear();
    state_ = State::kText;
    return true;
  }
  raw_ += buf_.substr(0, i + open.size());
  buf_.erase(0, i + open.size());
  state_ = State::kObject;
  return true;
}

// Whitespace, then the call's "{".
bool ToolCallParser::step_object(Out& out) {
  const size_t i = skip_ws(buf_, 0);
  if (i == buf_.size()) return false;
  raw_ += buf_.substr(0, i);
  buf_.erase(0, i);
  if (buf_[0] != '{') {
    out.content += raw_;
    raw_.clear();
    state_ = State::kText;
    return true;
  }
  obj_.clear();
  ws_.clear();
  depth_ = 0;
  in_string_ = escaped_ = false;
  state_ = State::kHeader;
  return true;
}

// After a call: its close tag, a separator and the next call, the section's
// end, or text.
bool ToolCallParser::step_after() {
  const size_t i = skip_ws(buf_, 0);
  const std::string_view rest = std::string_view(buf_).substr(i);
  if (rest.empty()) return false;
  const auto take = [&](std::string_view w, State next) {
    raw_ += buf_.substr(0, i + w.size());
    buf_.erase(0, i + w.size());
    state_ = next;
    return true;
  };
  const std::string& close = syntax_->call_close;
  if (!close.empty() && !closed_) {
    if (rest.starts_with(close)) {
      closed_ = true;
      return take(close, State::kText);
    }
    if (close.starts_with(rest)) return false;
  }
  // Separators are matched without their spaces: the model may write ";" alone.
  const std::string sep(syntax_->separator.substr(0, 1));
  if (!sep.empty() && rest.starts_with(sep)) return take(sep, State::kObject);
  const std::string& end = syntax_->section_close;
  if (!end.empty() && rest.starts_with(end)) return take(end, State::kText);
  raw_.clear();
  state_ = State::kText;  // the rest (whitespace included) is content
  return true;
}

void ToolCallParser::scan(char c) {
  if (in_string_) {
    if (escaped_) {
      escaped_ = false;
    } else if (c == '\\') {
      escaped_ = true;
    } else if (c == '"') {
      in_string_ = false;
    }
  } else if (c == '"') {
    in_string_ = true;
  } else if (c == '{' || c == '[') {
    ++depth_;
  } else if (c == '}' || c == ']') {
    --depth_;
  }
}

void ToolCallParser::step_char(char c, Out& out) {
  raw_ += c;
  if (state_ == State::kArgs && !in_string_ && depth_ == 1) {
    // Only the call's object is open: the arguments' value has ended at a
    // comma or the object's brace; whitespace may still be inside a scalar.
    if (c == ',') {
      state_ = State::kTail;
      return;
    }
    if (c == '}') {
      depth_ = 0;
      finish_call();
      return;
    }
    if (is_ws(c)) {
      ws_ += c;
      return;
    }
  }
  scan(c);
  switch (state_) {
    case State::kArgs:
      emit_args(out, ws_ + c);
      ws_.clear();
      break;
    case State::kHeader: {
      obj_ += c;
      std::string name;
      size_t value = 0;
      const Head h = depth_ == 0 ? Head::kNo : match_head(obj_, name, value);
      if (h == Head::kMatch) {
        out.deltas.push_back({index_, new_tool_call_id(format_), name, ""});
        emit_args(out, obj_.substr(value));
        state_ = State::kArgs;
      } else if (h == Head::kNo || obj_.size() > kMaxHeader) {
        state_ = State::kWhole;
        if (depth_ == 0) finish_whole(out);
      }
      break;
    }
    case State::kWhole:
      obj_ += c;
      if (depth_ == 0) finish_whole(out);
      break;
    case State::kTail:
      if (depth_ == 0) finish_call();
      break;
    default:
      break;
  }
}

// Pieces of one push go out as one delta.
void ToolCallParser::emit_args(Out& out, std::string text) {
  if (!out.deltas.empty() && out.deltas.back().index == index_ && out.deltas.back().id.empty()) {
    out.deltas.back().arguments += text;
  } else {
    out.deltas.push_back({index_, "", "", std::move(text)});
  }
}

void ToolCallParser::finish_call() {
  ++finished_;
  ++index_;
  raw_.clear();
  closed_ = false;
  state_ = State::kAfter;
}

// A call held whole: released if it is an object with a string name.
void ToolCallParser::finish_whole(Out& out) {
  const json j = json::parse(obj_, nullptr, /*allow_exceptions=*/false);
  const auto name = j.is_object() ? j.find("name") : j.end();
  if (!j.is_object() || name == j.end() || !name->is_string() || name->get<std::string>().empty()) {
    out.content += raw_;
    raw_.clear();
    state_ = State::kText;
    return;
  }
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  out.deltas.push_back({index_, new_tool_call_id(format_), name->get<std::string>(), ""});
  out.deltas.push_back({index_, "", "", args == j.end() ? "{}" : args->dump()});
  finish_call();
}

ToolCallParser::Out ToolCallParser::flush() {
  Out out;
  switch (state_) {
    case State::kArgs:
    case State::kTail:
      out.unfinished = raw_ + buf_;  // its deltas are out
      break;
    case State::kText:
    case State::kAfter:
      out.content = buf_;
      break;
    default:
      out.content = raw_ + buf_;
  }
  buf_.clear();
  raw_.clear();
  state_ = State::kText;
  return out;
}

ParsedToolCalls parse_tool_calls(ToolFormat format, std::string_view text,
                                 const std::vector<std::string>& bare_triggers) {
  ToolCallParser p(format, bare_triggers);
  ToolCallParser::Out a = p.push(text), b = p.flush();
  ParsedToolCalls out;
  out.content = a.content + b.content + b.unfinished;
  out.calls.resize(static_cast<size_t>(p.finished_calls()));
  for (const ToolCallDelta& d : a.deltas) {
    if (d.index >= p.finished_calls()) continue;
    ToolCall& c = out.calls[static_cast<size_t>(d.index)];
    if (!d.id.empty()) c.id = d.id, c.name = d.name;
    c.arguments += d.arguments;
  }
  return out;
}

std::string new_tool_call_id(ToolFormat format) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  if (format == ToolFormat::kMistral) {
    // Mistral's templates take exactly nine letters and digits.
    static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    std::string id;
    for (int i = 0; i < 9; ++i) id += kAlnum[rng() % 62];
    return id;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kHex[rng() & 15];
  return id;
}

}  // namespace agentkv::server
