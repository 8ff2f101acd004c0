// `bench-relay --workload capture-overhead`: what relay's captures cost in
// decode (issue: <= 10% of the decode step). The same prompt is decoded under
// `none` (no captures) and under `relay` (the hidden state entering l_start
// and the influence score of every generated token), interleaved per
// repetition, at each context length; nothing is reused (each run has its
// own namespace), so the difference is the captures alone.
#pragma once

#include <cstdint>
#include <vector>

#include "workloads/relay_chain.h"

namespace agentkv {

struct CaptureOverheadOptions {
  std::vector<int32_t> contexts = {512, 2048};
  int32_t gen_tokens = 128;
  int32_t reps = 3;
};

struct CaptureOverheadRow {
  int32_t context = 0;
  double plain_ms = 0;    // median decode time per token under none
  double capture_ms = 0;  // the same under relay
  double overhead = 0;    // capture_ms / plain_ms - 1
};

// o.schemes is not used: the two are none and relay (with o.relay_profile).
Result<std::vector<CaptureOverheadRow>> run_capture_overhead(const RelayBenchOptions& o,
                                                             const CaptureOverheadOptions& c);

}  // namespace agentkv
