// Limits the GGUF reader enforces beyond the file size itself.
#pragma once

#include <cstdint>

namespace agentkv {

// Arrays of arrays deeper than this are rejected (no real file nests at all;
// the cap keeps recursion bounded on hostile input).
inline constexpr int kGgufMaxArrayDepth = 8;

// Every metadata array element becomes a GgufValue (~100 bytes), so a 16 MB
// u8 array would cost 1.6 GB. Real files hold well under 2M elements (vocab,
// merges, scores, token types of a 256k vocabulary).
inline constexpr uint64_t kGgufMaxArrayElements = uint64_t{1} << 24;

}  // namespace agentkv
