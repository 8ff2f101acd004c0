#include "grammar/grammar_cache.h"

#include <dlpack/dlpack.h>
#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <exception>
#include <optional>
#include <vector>

#include "grammar/schema_check.h"
#include "tokenizer/tokenizer.h"

namespace agentkv {

namespace {

class XgrammarMatcher final : public TokenMatcher {
 public:
  explicit XgrammarMatcher(const xgrammar::CompiledGrammar& g) : m_(g) {}

  void fill_mask(std::span<uint32_t> mask) override {
    int64_t shape[1] = {static_cast<int64_t>(mask.size())};
    DLTensor t{};
    t.data = mask.data();
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 1;
    t.dtype = xgrammar::GetBitmaskDLType();
    t.shape = shape;
    t.strides = nullptr;
    t.byte_offset = 0;
    m_.FillNextTokenBitmask(&t, 0);
  }
  bool accept(int32_t token) override { return m_.AcceptToken(token); }
  bool terminated() const override { return m_.IsTerminated(); }

 private:
  xgrammar::GrammarMatcher m_;
};

class XgrammarConstraint final : public TokenConstraint {
 public:
  explicit XgrammarConstraint(xgrammar::CompiledGrammar g) : g_(std::move(g)) {}
  std::unique_ptr<TokenMatcher> matcher() const override { return std::make_unique<XgrammarMatcher>(g_); }

 private:
  xgrammar::CompiledGrammar g_;
};

// The product of bounded repetitions nested in a regex (see
// kMaxRegexRepetition). A rough parser: groups, escapes, classes and
// {m}, {m,}, {m,n}; whatever else passes to the converter, which rejects
// what it cannot parse.
Status check_regex(const std::string& re) {
  if (re.size() > kMaxRegexBytes) {
    return make_error(ErrorCode::kInvalidArgument, "the regex is ", re.size(), " bytes; at most ", kMaxRegexBytes);
  }
  std::vector<long> group_max{1};  // per open group: the largest product inside it
  long last = 1;                   // the product of the most recent atom
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '\\') {
      ++i;
      last = 1;
    } else if (c == '[') {
      for (++i; i < re.size() && re[i] != ']'; ++i) {
        if (re[i] == '\\') ++i;
      }
      last = 1;
    } else if (c == '(') {
      group_max.push_back(1);
    } else if (c == ')') {
      if (group_max.size() > 1) {
        last = group_max.back();
        group_max.pop_back();
        group_max.back() = std::max(group_max.back(), last);
      }
    } else if (c == '{') {
      // {m}, {m,} or {m,n}: the larger bound counts ({m,} as m).
      long bound[2] = {0, 0};
      int part = 0;
      bool digits = false;
      size_t j = i + 1;
      for (; j < re.size(); ++j) {
        if (re[j] == ',' && part == 0) {
          part = 1;
        } else if (std::isdigit(static_cast<unsigned char>(re[j]))) {
          digits = true;
          bound[part] = std::min(bound[part] * 10 + (re[j] - '0'), kMaxRegexRepetition + 1);
        } else {
          break;
        }
      }
      if (!digits || j >= re.size() || re[j] != '}') {
        last = 1;  // a literal '{'
        continue;
      }
      i = j;
      const long p = last * std::max({bound[0], bound[1], 1L});
      if (p > kMaxRegexRepetition) {
        return make_error(ErrorCode::kInvalidArgument, "the regex repeats more than ", kMaxRegexRepetition,
                          " times in all (nested {m,n} counts multiply)");
      }
      last = p;
      group_max.back() = std::max(group_max.back(), p);
    } else {
      last = 1;
    }
  }
  return Status::ok();
}

std::string cache_key(const GrammarSpec& s) { return std::string(grammar_kind_name(s.kind)) + '\0' + s.text; }

}  // namespace

struct GrammarCache::Impl {
  explicit Impl(const xgrammar::TokenizerInfo& info) : compiler(info, /*max_threads=*/1, /*cache_enabled=*/false) {}
  xgrammar::GrammarCompiler compiler;

  xgrammar::CompiledGrammar compile(const GrammarSpec& s) {
    switch (s.kind) {
      case GrammarKind::kJsonObject:
        return compiler.CompileJSONSchema(R"({"type": "object"})", /*any_whitespace=*/false);
      case GrammarKind::kJsonSchema:
        // Compact separators (", " and ": "), no free whitespace: a small
        // model given any_whitespace can emit newlines until max_tokens.
        return compiler.CompileJSONSchema(s.text, /*any_whitespace=*/false, std::nullopt, std::nullopt,
                                          /*strict_mode=*/true);
      case GrammarKind::kRegex:
        return compiler.CompileRegex(s.text);
      case GrammarKind::kEbnf:
        return compiler.CompileGrammar(s.text, "root");
      case GrammarKind::kStructuralTag:
        return compiler.CompileStructuralTag(s.text);
    }
    throw std::invalid_argument("unknown grammar kind");
  }
};

const char* grammar_kind_name(GrammarKind kind) {
  switch (kind) {
    case GrammarKind::kJsonObject:
      return "json_object";
    case GrammarKind::kJsonSchema:
      return "json_schema";
    case GrammarKind::kRegex:
      return "regex";
    case GrammarKind::kEbnf:
      return "ebnf";
    case GrammarKind::kStructuralTag:
      return "structural_tag";
  }
  return "?";
}

Status grammar_check_limits(const GrammarSpec& spec) {
  if (spec.text.size() > kMaxGrammarBytes) {
    return make_error(ErrorCode::kInvalidArgument, "the ", grammar_kind_name(spec.kind), " is ", spec.text.size(),
                      " bytes; at most ", kMaxGrammarBytes);
  }
  if (spec.kind == GrammarKind::kRegex) return check_regex(spec.text);
  if (spec.kind == GrammarKind::kJsonSchema) return json_schema_check_supported(spec.text);
  // A structural tag (tool calls) carries the tools' schemas; its own depth
  // is theirs plus a few levels.
  if (spec.kind == GrammarKind::kStructuralTag) return json_nesting_within(spec.text, kMaxSchemaDepth + 8);
  return Status::ok();
}

Result<std::unique_ptr<GrammarCache>> GrammarCache::create(const Tokenizer& tok, int32_t n_vocab,
                                                           int32_t max_entries) {
  // The vocabulary as raw bytes; control tokens (chat markers) are empty,
  // which xgrammar treats as special: never part of a grammar's text.
  std::vector<std::string> vocab(static_cast<size_t>(tok.n_vocab()));
  std::vector<int32_t> stops;
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    if (tok.is_eog(id)) stops.push_back(id);
    if (!tok.is_control(id)) vocab[static_cast<size_t>(id)] = tok.token_to_piece(id);
  }
  return create(std::move(vocab), std::move(stops), n_vocab, max_entries);
}

Result<std::unique_ptr<GrammarCache>> GrammarCache::create(std::vector<std::string> pieces, std::vector<int32_t> stops,
                                                           int32_t n_vocab, int32_t max_entries) {
  if (n_vocab < static_cast<int32_t>(pieces.size())) {
    return make_error(ErrorCode::kInvalidArgument, "n_vocab ", n_vocab, " is below the vocabulary's ", pieces.size());
  }
  if (stops.empty()) return make_error(ErrorCode::kInvalidArgument, "the vocabulary has no end-of-generation token");
  try {
    xgrammar::TokenizerInfo info(pieces, xgrammar::VocabType::RAW, n_vocab, stops);
    return std::unique_ptr<GrammarCache>(new GrammarCache(std::make_unique<Impl>(info), n_vocab, max_entries));
  } catch (const std::exception& e) {
    return make_error(ErrorCode::kInternal, "xgrammar refused the vocabulary: ", e.what());
  }
}

GrammarCache::GrammarCache(std::unique_ptr<Impl> impl, int32_t n_vocab, int32_t max_entries)
    : impl_(std::move(impl)), n_vocab_(n_vocab), max_entries_(std::max(1, max_entries)) {}

GrammarCache::~GrammarCache() = default;

Result<std::shared_ptr<const TokenConstraint>> GrammarCache::get(const GrammarSpec& spec) {
  AKV_RETURN_IF_ERROR(grammar_check_limits(spec));
  const std::string key = cache_key(spec);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++stats_.hits;
      return it->second->second;
    }
  }
  // Compiled outside the lock: another request's grammar need not wait.
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<const TokenConstraint> c;
  std::string error;
  try {
    c = std::make_shared<XgrammarConstraint>(impl_->compile(spec));
  } catch (const std::exception& e) {
    error = e.what();
  }
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> lk(mu_);
  ++stats_.misses;
  stats_.compile_seconds += dt;
  stats_.last_compile_seconds = dt;
  if (!c) {
    // xgrammar's messages may start with its source file:line and the failed
    // check; keep the reason only (no build paths in an API error).
    if (auto p = error.find(".cc:"); p != std::string::npos) {
      if (auto q = error.find(": ", p); q != std::string::npos) error = error.substr(q + 2);
    }
    if (auto p = error.find(" is false: "); p != std::string::npos) error = error.substr(p + 11);
    while (!error.empty() && (error.back() == '\n' || error.back() == ' ')) error.pop_back();
    return make_error(ErrorCode::kInvalidArgument, "the ", grammar_kind_name(spec.kind), " cannot be compiled: ", error);
  }
  if (index_.find(key) == index_.end()) {
    lru_.emplace_front(key, c);
    index_[key] = lru_.begin();
    while (static_cast<int32_t>(lru_.size()) > max_entries_) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
  }
  stats_.entries = static_cast<int32_t>(lru_.size());
  return c;
}

GrammarCacheStats GrammarCache::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

}  // namespace agentkv
