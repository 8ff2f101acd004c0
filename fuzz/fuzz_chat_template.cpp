// libFuzzer target for chat templates (llama.cpp's Jinja engine, compiled
// into this build with ASan and UBSan, and JinjaTemplate around it). The
// input is a template source, then optionally "\x01" and a message's
// content. For any input:
//   - compiling and rendering never crash, hang or run out of memory: an
//     error is a Status (small budgets here, so a loop ends quickly);
//   - the marked spans are in order, disjoint and inside the text.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fuzz_support.h"
#include "tokenizer/jinja_template.h"

using namespace agentkv;

namespace {

using fuzz::check;

const char* const kSeeds[] = {
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}\x01hello",
    "{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}[INST] {{ m.content | trim }} [/INST]"
    "{% else %}{{ m.content }}{{ eos_token }}{% endif %}{% endfor %}\x01<s>[INST]",
    "{% set ns = namespace(x=0) %}{% for m in messages %}{% set ns.x = ns.x + 1 %}{{ m.content.split(' ')"
    " | join('|') }}{% endfor %}{{ ns.x }}\x01a b c",
    "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{{ n }}{% endmacro %}{{ f(5) }}"
    "{{ messages | tojson(indent=2) }}\x01\"quoted\"",
    "{%- if tools %}{% for t in tools %}{{ t | tojson }}{% endfor %}{% endif %}"
    "{{ raise_exception('x') if messages | length > 3 }}{{ strftime_now('%Y') }}\x01x",
};

// The seeds above, and the 72 real templates scripts/setup_jinja.sh keeps
// beside the engine's sources.
void write_seeds(const std::string& dir) {
  fuzz::write_text_seeds(dir, "template", kSeeds);
  const char* env = std::getenv("AGENTKV_JINJA_DIR");
  const char* home = std::getenv("HOME");
  const std::filesystem::path real = env ? std::filesystem::path(env) / "templates"
                                   : home ? std::filesystem::path(home) / ".cache/agentkv/jinja-11434.0.0/templates"
                                          : std::filesystem::path();
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(real, ec)) {
    std::filesystem::copy_file(e.path(), std::filesystem::path(dir) / e.path().filename(),
                               std::filesystem::copy_options::overwrite_existing, ec);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) { return fuzz::write_seeds_if_asked(write_seeds); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t cut = in.find('\x01');
  const std::string src(in.substr(0, cut));
  const std::string content(cut == std::string_view::npos ? std::string_view() : in.substr(cut + 1));
  JinjaLimits limits;
  limits.max_steps = 20000;
  limits.steps_per_input_byte = 1;
  limits.max_bytes = 1 << 20;
  limits.bytes_per_input_byte = 16;
  limits.max_depth = 128;
  Result<JinjaTemplate> t = JinjaTemplate::compile(src, limits);
  if (!t.is_ok()) return 0;
  const nlohmann::json input = {
      {"messages", {{{"role", "user"}, {"content", content}}, {{"role", "assistant"}, {"content", "ok"}}}},
      {"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", nlohmann::json::object()}}}}}}};
  const std::string own = R"({"bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true})";
  Result<MarkedText> r = t->render(input.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), own);
  if (!r.is_ok()) return 0;
  size_t at = 0;
  for (const TextSpan& s : r->input_spans) {
    check(s.begin >= at && s.begin < s.end && s.end <= r->text.size(), "spans are ordered, disjoint and inside");
    at = s.end;
  }
  return 0;
}
