// What a JSON Schema may use here. xgrammar compiles most of JSON Schema, but
// it skips some keywords with only a log line (not, if/then/else,
// dependencies, uniqueItems, contains, multipleOf on numbers, the exclusivity
// of oneOf, allOf of several schemas, a string's length beside its pattern):
// a schema that relies on one would be served output that breaks it. Those
// are refused here, by name, so that a request gets a 400 rather than
// silently weaker output.
#pragma once

#include <string_view>

#include "util/status.h"

namespace agentkv {

inline constexpr int kMaxSchemaDepth = 64;    // nesting of { and [ in a schema's text
inline constexpr int kMaxSchemaCount = 4096;  // minItems, maxLength, ... (the regex repetition cap)

// kInvalidArgument naming the keyword (and its JSON pointer) or the depth.
Status json_schema_check_supported(std::string_view schema);

// kInvalidArgument when `text` nests { and [ (outside strings) deeper than max_depth.
Status json_nesting_within(std::string_view text, int max_depth);

}  // namespace agentkv
