// The statistics every bench, profiler and report shares, so that a
// "median" or a "KL" means one thing across the project.
#pragma once

#include <cstdint>
#include <vector>

namespace agentkv {

// The middle value; for an even count the mean of the two middle ones; 0 for none.
double median(std::vector<double> v);

// KL(p || q) in nats, in double, of the distributions that two rows of n
// logits (or log-probabilities: a log-softmax is normalised again exactly)
// give; clamped at 0 against rounding.
double kl_divergence(const float* p_logits, const float* q_logits, int64_t n);

}  // namespace agentkv
