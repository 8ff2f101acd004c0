// libFuzzer target for the grammar compiler: the first byte picks the kind
// (JSON schema, regex, EBNF, structural tag), the rest is the grammar text.
// For any bytes, GrammarCache::get must return (never crash, hang or throw
// out): either kInvalidArgument with a message, or a grammar whose matcher
// fills a mask and accepts some allowed token. The limits of grammar_spec.h
// and schema_check.h run first, as they do for a request.
// Note: xgrammar itself is built without coverage instrumentation, so the
// fuzzer steers by our checks' branches; xgrammar is exercised, not explored.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "grammar/grammar_cache.h"

using namespace agentkv;
namespace fuzz = agentkv::fuzz;

namespace {

std::unique_ptr<GrammarCache> make_cache() {
  std::vector<std::string> v{"</s>"};
  for (int c = 32; c < 127; ++c) v.push_back(std::string(1, static_cast<char>(c)));
  for (const char* p : {"\n", "{\"", "\":", "true", "null", "<tool_call>"}) v.push_back(p);
  auto c = GrammarCache::create(v, {0}, static_cast<int32_t>(v.size()), /*max_entries=*/8);
  fuzz::check(c.is_ok(), "the vocabulary is accepted");
  return std::move(c).value();
}

void write_seeds(const std::string& dir) {
  static const char* const kSeeds[] = {
      "j{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}",
      "j{\"type\":\"array\",\"items\":{\"enum\":[1,\"x\",null]},\"maxItems\":3}",
      "r[0-9]{3}-[a-z]+",
      "eroot ::= \"yes\" | \"no\"",
      "s{\"type\":\"structural_tag\",\"format\":{\"type\":\"triggered_tags\",\"triggers\":[\"<tool_call>\"],"
      "\"tags\":[{\"type\":\"tag\",\"begin\":\"<tool_call>\",\"content\":{\"type\":\"json_schema\","
      "\"json_schema\":{}},\"end\":\"</tool_call>\"}]}}",
  };
  fuzz::write_text_seeds(dir, "grammar", kSeeds);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) { return fuzz::write_seeds_if_asked(write_seeds); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::unique_ptr<GrammarCache> cache = make_cache();
  if (size == 0 || size > 4096) return 0;  // compile time grows with the text; requests allow 256 KiB
  GrammarSpec spec;
  switch (data[0]) {
    case 'r': spec.kind = GrammarKind::kRegex; break;
    case 'e': spec.kind = GrammarKind::kEbnf; break;
    case 's': spec.kind = GrammarKind::kStructuralTag; break;
    default: spec.kind = GrammarKind::kJsonSchema; break;
  }
  spec.text.assign(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto g = cache->get(spec);
  if (!g.is_ok()) {
    fuzz::check(g.status().code() == ErrorCode::kInvalidArgument, "a bad grammar is kInvalidArgument");
    fuzz::check(!g.status().message().empty(), "the error has a message");
    return 0;
  }
  auto m = (*g)->matcher();
  std::vector<uint32_t> mask((cache->n_vocab() + 31) / 32);
  for (int step = 0; step < 4; ++step) {
    m->fill_mask(mask);
    int32_t pick = -1;
    for (int32_t id = 0; id < cache->n_vocab() && pick < 0; ++id) {
      if ((mask[id >> 5] >> (id & 31)) & 1u) pick = id;
    }
    if (pick < 0) break;
    fuzz::check(m->accept(pick), "an allowed token is accepted");
    if (pick == 0) break;
  }
  return 0;
}
