// libFuzzer target for serve --segment-dir's file parser
// (server::parse_segment_file). Any input either yields segments or
// warnings, never a crash. A segment it yields has a non-empty token list of
// non-negative ids and string fields that serialise back to JSON. The model id
// it is told to expect comes from the input's first byte: an input can name
// it or not.
//
// Seed corpus: AGENTKV_FUZZ_WRITE_SEEDS=<dir> fuzz_segment_file -runs=0
// writes a file save_segments wrote, and a few broken ones (scripts/fuzz.sh).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_support.h"
#include "server/segment_store.h"

using namespace agentkv;

namespace {

using fuzz::check;

void write_seeds(const std::string& dir) {
  std::vector<SegmentSpec> segs = {{{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}, "t", "s", "seg-1"},
                                   {{7, 7, 7}, "", "", "seg-2"}};
  (void)server::save_segments(dir, "m", segs);  // writes dir/segments.json
  const char* broken[] = {
      R"({"format":"agentkv-segments","version":1,"model_id":"m","segments":[{"id":"a","tenant":"","cache_salt":"","tokens":[-1]}]})",
      R"({"format":"agentkv-segments","version":1,"model_id":"other","segments":[]})",
      R"({"format":"agentkv-segments","version":2})",
      R"({"format":"agentkv-segments","version":1,"model_id":"m","segments":[{"id":5},{"tokens":[]},[]]})",
  };
  fuzz::write_text_seeds(dir, "broken", broken);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) { return fuzz::write_seeds_if_asked(write_seeds); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string model_id = size > 0 && (data[0] & 1) ? "other" : "m";
  std::vector<std::string> warnings;
  const std::vector<SegmentSpec> segs = server::parse_segment_file(text, model_id, &warnings);
  for (const SegmentSpec& s : segs) {
    check(!s.tokens.empty(), "a restored segment has tokens");
    for (int32_t t : s.tokens) check(t >= 0, "token ids are non-negative");
    (void)nlohmann::json({s.id, s.tenant, s.cache_salt}).dump();  // throws (-> crash) on invalid UTF-8
  }
  for (const std::string& w : warnings) check(!w.empty(), "warnings say something");
  return 0;
}
