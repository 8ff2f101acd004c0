// Kernel inner loops left uninstrumented under ASan, checked by their callers.
//
// A shadow check on every vector load made the real-model tests 15-35x
// slower under ASan than in release (perf, 2026-12-03: 90% of
// Lragent.SecondAgentReusesWhatItsSchemeShares in dot_tile_f32's loop, 48%
// of ServingExact.PreemptionUnderATinyPoolStillMatches in the q8 panel
// tile), which kept the sanitizer stage near 19 minutes. So a tile marked
// AGENTKV_TILE_NO_SANITIZE is not instrumented, and its caller checks once
// per call, with check_region, that every byte the tile reads or writes is
// addressable: an out-of-bounds row or a freed buffer is still reported,
// with ASan's own report. What goes unchecked is the tile's indexing inside
// those regions, which the backend tests check bit for bit against the
// rule. Outside sanitizer builds both are nothing.
#pragma once

#include <cstddef>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define AGENTKV_TILE_NO_SANITIZE __attribute__((no_sanitize_address, no_sanitize("undefined")))
#else
#define AGENTKV_TILE_NO_SANITIZE
#endif

namespace agentkv::cpu {

// [p, p + bytes) is addressable, or ASan reports the first bad byte.
inline void check_region([[maybe_unused]] const void* p, [[maybe_unused]] size_t bytes) {
#if defined(__SANITIZE_ADDRESS__)
  if (bytes == 0) return;
  // An instrumented read of the first bad byte: ASan's report, stack and all.
  if (void* bad = __asan_region_is_poisoned(const_cast<void*>(p), bytes)) (void)*static_cast<volatile const char*>(bad);
#endif
}

}  // namespace agentkv::cpu
