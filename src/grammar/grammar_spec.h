// What a request asks its output to match, before compilation: the OpenAI
// and vLLM request fields (response_format, guided_*, tools) reduce to one of
// these. Pure data; src/grammar/grammar_cache.h compiles it.
#pragma once

#include <cstddef>
#include <string>

namespace agentkv {

enum class GrammarKind {
  kJsonObject,     // any JSON object (response_format json_object)
  kJsonSchema,     // text: a JSON Schema (response_format json_schema, guided_json)
  kRegex,          // text: a regular expression (guided_regex)
  kEbnf,           // text: an EBNF/GBNF grammar whose root rule is `root` (guided_grammar)
  kStructuralTag,  // text: an xgrammar structural tag (tool calls; docs/usage.md, "Tool calls")
};

struct GrammarSpec {
  GrammarKind kind = GrammarKind::kJsonObject;
  std::string text;
};

// Limits that keep a client's grammar from costing the server more than a
// request should (each over-limit grammar is a 400 naming the field).
inline constexpr std::size_t kMaxGrammarBytes = 256u << 10;  // a schema, regex or grammar
inline constexpr std::size_t kMaxRegexBytes = 4096;
// The product of the bounded repetition counts nested in one regex
// ((a{100}){100} is 10^4): the converter unrolls them into grammar rules.
inline constexpr long kMaxRegexRepetition = 4096;

const char* grammar_kind_name(GrammarKind kind);  // "json_object", "json_schema", "regex", "ebnf", "structural_tag"

}  // namespace agentkv
