// libFuzzer target for the tool-call parser (server/tool_call_parser.h): the
// first byte picks the format, the rest is generated text. For any text the
// parser must return (never crash or read out of bounds), and what it
// releases must not depend on how the text is cut: fed whole and fed a byte
// at a time, the content, the calls' names and their arguments agree, every
// call is named by its first delta, and parse_tool_calls returns only
// finished calls.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "server/tool_call_parser.h"

using namespace agentkv::server;
namespace fuzz = agentkv::fuzz;

namespace {

struct Seen {
  std::string content, unfinished;
  std::vector<std::string> names, args;
};

void take(Seen& s, ToolCallParser::Out&& o) {
  s.content += o.content;
  s.unfinished += o.unfinished;
  for (const ToolCallDelta& d : o.deltas) {
    if (!d.id.empty()) {
      fuzz::check(!d.name.empty(), "a call has a name");
      fuzz::check(d.index == static_cast<int>(s.names.size()), "a call's first delta comes in order");
      s.names.push_back(d.name);
      s.args.push_back(d.arguments);
    } else {
      fuzz::check(d.index + 1 == static_cast<int>(s.names.size()), "arguments belong to the last call begun");
      s.args.back() += d.arguments;
    }
  }
}

void write_seeds(const std::string& dir) {
  static const char* const kSeeds[] = {
      "hok<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, \"}\"]}}\n</tool_call>\n<tool_call>{}",
      "l{\"name\": \"f\", \"parameters\": {\"a\": 1}}; {\"name\": \"g\", \"parameters\": \"x\\\"\"}",
      "m[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}}, {\"arguments\": 2, \"name\": \"g\"}]",
  };
  fuzz::write_text_seeds(dir, "toolcalls", kSeeds);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) { return fuzz::write_seeds_if_asked(write_seeds); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 8192) return 0;
  const ToolFormat f = data[0] % 3 == 0   ? ToolFormat::kHermes
                       : data[0] % 3 == 1 ? ToolFormat::kLlama3
                                          : ToolFormat::kMistral;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);

  ToolCallParser whole(f);
  Seen a;
  take(a, whole.push(text));
  take(a, whole.flush());

  ToolCallParser bytes(f);
  Seen b;
  for (char c : text) take(b, bytes.push(std::string(1, c)));
  take(b, bytes.flush());

  fuzz::check(a.content == b.content, "content does not depend on the cuts");
  fuzz::check(a.unfinished == b.unfinished, "an unfinished call does not depend on the cuts");
  fuzz::check(a.names == b.names && a.args == b.args, "calls do not depend on the cuts");
  fuzz::check(whole.finished_calls() == bytes.finished_calls(), "finished calls do not depend on the cuts");
  fuzz::check(whole.finished_calls() <= static_cast<int>(a.names.size()), "a finished call was begun");

  const ParsedToolCalls p = parse_tool_calls(f, text);
  fuzz::check(static_cast<int>(p.calls.size()) == whole.finished_calls(),
              "whole responses carry finished calls only");
  for (size_t i = 0; i < p.calls.size(); ++i) {
    fuzz::check(p.calls[i].name == a.names[i] && p.calls[i].arguments == a.args[i],
                "whole and streamed calls agree");
  }
  return 0;
}
