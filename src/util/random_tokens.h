// Token ids drawn uniformly from the whole vocabulary, for benchmarks whose
// timing does not depend on what the tokens say (bench-forward,
// bench_paired_step).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace agentkv {

inline std::vector<int32_t> random_tokens(int n, int n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, n_vocab - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

}  // namespace agentkv
