// Text whose byte ranges say where it came from: a rendered chat template
// marks the ranges that came from the request (message content, tools, tool
// arguments), so that only the template's own text becomes control tokens.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace agentkv {

// [begin, end) byte offsets into MarkedText::text.
struct TextSpan {
  size_t begin = 0, end = 0;
};

// input_spans are in order and disjoint.
struct MarkedText {
  std::string text;
  std::vector<TextSpan> input_spans;
  // What rendering cost (JinjaLimits): steps and bytes; 0 for a built-in.
  int64_t render_steps = 0, render_bytes = 0;
};

}  // namespace agentkv
