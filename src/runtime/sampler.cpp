#include "runtime/sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace agentkv {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// top-p buckets tokens by max_logit - logit: kTopPBuckets buckets over
// [0, kTopPSpan), the last one also taking everything further down.
constexpr int kTopPBuckets = 1024;
constexpr float kTopPSpan = 16.0f;

struct MaxInfo {
  float logit = kNegInf;
  int32_t id = 0;  // first (lowest) id holding the maximum
};

MaxInfo find_max(std::span<const float> logits) {
  MaxInfo m;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > m.logit) {
      m.logit = logits[i];
      m.id = static_cast<int32_t>(i);
    }
  }
  return m;
}

// Sum of exp(l - max) over the whole row: the temperature-1 partition function
// relative to the max logit.
double partition(std::span<const float> logits, float max_logit) {
  double sum = 0.0;
  for (float l : logits) sum += std::isnan(l) ? 0.0f : std::exp(l - max_logit);
  return sum;
}

// Higher logit first; equal logits by lower id, so every cut is deterministic.
bool ranks_before(float la, int32_t ia, float lb, int32_t ib) { return la > lb || (la == lb && ia < ib); }

// Rearranges c[lo, hi) so that it starts with the shortest run, in
// ranks_before order, whose weights sum to at least `need`, and returns the
// end of that run (hi if the whole range falls short). Quickselect on mass:
// partition around a pivot, keep the side where the sum crosses `need`.
template <typename Cand>
size_t select_mass(Cand* c, size_t lo, size_t hi, double need) {
  auto before = [](const Cand& a, const Cand& b) { return ranks_before(a.logit, a.id, b.logit, b.id); };
  uint64_t state = 0x9E3779B97F4A7C15ull;  // fixed: the same logits always give the same cut
  while (hi - lo > 32) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    std::swap(c[lo], c[lo + state % (hi - lo)]);
    const Cand pivot = c[lo];
    Cand* mid = std::partition(c + lo + 1, c + hi, [&](const Cand& x) { return before(x, pivot); });
    const size_t m = static_cast<size_t>(mid - c);  // c[lo+1, m) rank before the pivot
    double better = 0.0;
    for (size_t i = lo + 1; i < m; ++i) better += c[i].weight;
    std::swap(c[lo], c[m - 1]);  // now c[lo, m-1) rank before the pivot at c[m-1]
    if (better >= need) {
      hi = m - 1;
      continue;
    }
    need -= better;
    if (double(pivot.weight) >= need) return m;
    need -= pivot.weight;
    lo = m;
  }
  std::sort(c + lo, c + hi, before);
  double cum = 0.0;
  for (size_t i = lo; i < hi; ++i) {
    cum += c[i].weight;
    if (cum >= need) return i + 1;
  }
  return hi;
}

// top-p over an unsorted row: rearranges c[0, n) so that the tokens top-p
// keeps come first and returns how many. Instead of sorting 49k tokens it
// histograms the mass by logit (buckets are monotone in the logit, so whole
// buckets are kept or dropped), finds the bucket where the cumulative mass
// crosses `target`, and selects exactly within that bucket only. Two
// branch-free passes over the row plus work on one bucket.
template <typename Cand>
size_t cut_top_p(Cand* c, size_t n, float max_logit, double target) {
  constexpr float kScale = kTopPBuckets / kTopPSpan;
  auto bucket = [max_logit](float logit) {
    const float d = (max_logit - logit) * kScale;  // >= 0; +inf for -inf logits
    return d < float(kTopPBuckets - 1) ? static_cast<int>(d) : kTopPBuckets - 1;
  };
  std::array<double, kTopPBuckets> mass{};
  std::array<uint32_t, kTopPBuckets> count{};
  for (size_t i = 0; i < n; ++i) {
    const int b = bucket(c[i].logit);
    mass[b] += c[i].weight;
    ++count[b];
  }
  int cb = 0;  // the bucket where the cumulative mass reaches target
  double before = 0.0;
  for (; cb < kTopPBuckets - 1 && before + mass[cb] < target; ++cb) before += mass[cb];

  // Buckets above cb go to the front, in place (k <= i: only read slots are
  // overwritten); bucket cb goes to `cross`. Unconditional stores with
  // conditional increments: no branch to mispredict.
  std::vector<Cand> cross(count[cb] + 1);
  size_t k = 0, j = 0;
  for (size_t i = 0; i < n; ++i) {
    const Cand x = c[i];
    const int b = bucket(x.logit);
    c[k] = x;
    k += b < cb;
    cross[j] = x;
    j += b == cb;
  }
  std::copy(cross.begin(), cross.begin() + j, c + k);
  return select_mass(c, k, k + j, target - before);
}

std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int32_t n, float max_logit,
                                       double log_z) {
  std::vector<TokenLogprob> top;
  if (n <= 0) return top;
  const size_t want = std::min(static_cast<size_t>(n), logits.size());
  top.reserve(want + 1);
  // Insertion into a short sorted list: a token enters it rarely after the
  // first few hundred, so this is one cheap compare per vocabulary entry.
  // logprob holds the raw logit until the end.
  auto before = [](const TokenLogprob& a, const TokenLogprob& b) {
    return ranks_before(a.logprob, a.id, b.logprob, b.id);
  };
  for (size_t i = 0; i < logits.size(); ++i) {
    TokenLogprob t{static_cast<int32_t>(i), std::isnan(logits[i]) ? kNegInf : logits[i]};
    if (top.size() == want && !before(t, top.back())) continue;
    top.insert(std::upper_bound(top.begin(), top.end(), t, before), t);
    if (top.size() > want) top.pop_back();
  }
  for (auto& t : top) t.logprob = static_cast<float>(double(t.logprob) - double(max_logit) - log_z);
  return top;
}

}  // namespace

SampleResult logprobs_of(std::span<const float> logits, int32_t id, int32_t n_top) {
  SampleResult r{id, kNegInf, {}};
  if (logits.empty() || id < 0 || static_cast<size_t>(id) >= logits.size()) return r;
  const MaxInfo max = find_max(logits);
  if (max.logit == kNegInf) return r;
  const double log_z = std::log(partition(logits, max.logit));
  r.logprob = static_cast<float>(double(logits[id]) - double(max.logit) - log_z);
  r.top = top_logprobs(logits, std::clamp(n_top, 0, SamplingParams::kMaxLogprobs), max.logit, log_z);
  return r;
}

bool SamplingParams::adjusts_logits() const {
  return repetition_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f || !logit_bias.empty();
}

Status SamplingParams::validate(int32_t vocab_size) const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
    return make_error(ErrorCode::kInvalidArgument, "temperature must be >= 0 (got ", temperature, ")");
  }
  if (top_k < 0) {
    return make_error(ErrorCode::kInvalidArgument, "top_k must be >= 0, 0 disables it (got ", top_k, ")");
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return make_error(ErrorCode::kInvalidArgument, "top_p must be in (0, 1] (got ", top_p, ")");
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    return make_error(ErrorCode::kInvalidArgument, "min_p must be in [0, 1] (got ", min_p, ")");
  }
  if (n_logprobs < 0 || n_logprobs > kMaxLogprobs) {
    return make_error(ErrorCode::kInvalidArgument, "n_logprobs must be in [0, ", kMaxLogprobs, "] (got ",
                      n_logprobs, ")");
  }
  // vLLM's SamplingParams._verify_args: repetition_penalty > 0,
  // presence/frequency_penalty in [-2, 2].
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
    return make_error(ErrorCode::kInvalidArgument, "repetition_penalty must be > 0 (got ", repetition_penalty, ")");
  }
  if (!(std::abs(frequency_penalty) <= kMaxPenalty)) {
    return make_error(ErrorCode::kInvalidArgument, "frequency_penalty must be in [-2, 2] (got ", frequency_penalty,
                      ")");
  }
  if (!(std::abs(presence_penalty) <= kMaxPenalty)) {
    return make_error(ErrorCode::kInvalidArgument, "presence_penalty must be in [-2, 2] (got ", presence_penalty,
                      ")");
  }
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || (vocab_size > 0 && id >= vocab_size)) {
      return make_error(ErrorCode::kInvalidArgument, "logit_bias token id ", id, " is outside the vocabulary (",
                        vocab_size, " tokens)");
    }
    if (!(std::abs(bias) <= kMaxLogitBias)) {
      return make_error(ErrorCode::kInvalidArgument, "logit_bias values must be in [-100, 100] (got ", bias,
                        " for token ", id, ")");
    }
  }
  return Status::ok();
}

Sampler::Sampler(SamplingParams p) : params_(p), rng_(p.seed) {
  // Clamp so that an unvalidated value degrades instead of misbehaving.
  if (!(params_.temperature >= 0.0f) || !std::isfinite(params_.temperature)) params_.temperature = 0.0f;
  params_.top_k = std::max(params_.top_k, 0);
  if (!(params_.top_p > 0.0f) || params_.top_p > 1.0f) params_.top_p = 1.0f;
  if (!(params_.min_p >= 0.0f)) params_.min_p = 0.0f;
  params_.min_p = std::min(params_.min_p, 1.0f);
  params_.n_logprobs = std::clamp(params_.n_logprobs, 0, SamplingParams::kMaxLogprobs);
  if (!(params_.repetition_penalty > 0.0f) || !std::isfinite(params_.repetition_penalty)) {
    params_.repetition_penalty = 1.0f;
  }
  const float kp = SamplingParams::kMaxPenalty, kb = SamplingParams::kMaxLogitBias;
  params_.frequency_penalty = std::isnan(params_.frequency_penalty) ? 0.0f : std::clamp(params_.frequency_penalty, -kp, kp);
  params_.presence_penalty = std::isnan(params_.presence_penalty) ? 0.0f : std::clamp(params_.presence_penalty, -kp, kp);
  std::erase_if(params_.logit_bias, [](const auto& b) { return b.first < 0 || std::isnan(b.second); });
  for (auto& b : params_.logit_bias) b.second = std::clamp(b.second, -kb, kb);
  adjusts_ = params_.adjusts_logits();
}

void Sampler::set_prompt(std::span<const int32_t> prompt) {
  if (params_.repetition_penalty == 1.0f) return;
  for (int32_t t : prompt) {
    if (t < 0) continue;
    if (static_cast<size_t>(t) >= seen_mask_.size()) seen_mask_.resize(static_cast<size_t>(t) + 1, 0);
    if (!seen_mask_[t]) {
      seen_mask_[t] = 1;
      seen_.push_back(t);
    }
  }
}

void Sampler::accept(int32_t token) {
  if (!adjusts_ || token < 0) return;
  set_prompt(std::span<const int32_t>(&token, 1));  // the repetition penalty covers outputs too
  if (static_cast<size_t>(token) >= out_counts_.size()) out_counts_.resize(static_cast<size_t>(token) + 1, 0);
  if (out_counts_[token]++ == 0) out_ids_.push_back(token);
}

std::span<const float> Sampler::adjust(std::span<const float> logits, std::vector<float>& buf,
                                       const uint32_t* allowed) const {
  if (!adjusts_ && allowed == nullptr) return logits;
  buf.assign(logits.begin(), logits.end());
  const size_t vocab = buf.size();
  // The order is vLLM's: bias (a logits processor) before the penalties.
  for (const auto& [id, bias] : params_.logit_bias) {
    if (static_cast<size_t>(id) < vocab) buf[id] += bias;
  }
  const float r = params_.repetition_penalty;
  if (r != 1.0f) {
    for (int32_t id : seen_) {
      if (static_cast<size_t>(id) >= vocab) continue;
      float& x = buf[id];
      x = x > 0.0f ? x / r : x * r;  // HF: both make the token less likely when r > 1
    }
  }
  const float f = params_.frequency_penalty, p = params_.presence_penalty;
  if (f != 0.0f || p != 0.0f) {
    for (int32_t id : out_ids_) {
      if (static_cast<size_t>(id) >= vocab) continue;
      buf[id] = buf[id] - f * static_cast<float>(out_counts_[id]);
      buf[id] = buf[id] - p;
    }
  }
  if (allowed != nullptr) {
    // The grammar's mask last: after bias and penalties, before the filters
    // (vLLM's order), so top-k/top-p/min-p see only what the grammar allows.
    for (size_t i = 0; i < vocab; ++i) {
      if (((allowed[i >> 5] >> (i & 31)) & 1u) == 0) buf[i] = kNegInf;
    }
  }
  return buf;
}

double Sampler::filter(std::span<const float> logits, float max_logit, std::vector<Candidate>& cands,
                       double* full_mass) const {
  const size_t vocab = logits.size();
  cands.resize(vocab);
  double mass = 0.0;
  for (size_t i = 0; i < vocab; ++i) {
    // NaN would break the strict ordering the sorts rely on: treat it as masked.
    const float l = std::isnan(logits[i]) ? kNegInf : logits[i];
    const float w = std::exp(l - max_logit);
    cands[i] = {static_cast<int32_t>(i), l, w};
    mass += w;
  }
  *full_mass = mass;
  auto before = [](const Candidate& a, const Candidate& b) {
    return ranks_before(a.logit, a.id, b.logit, b.id);
  };
  size_t n = vocab;     // live candidates are cands[0, n)
  bool sorted = false;  // cands[0, n) in ranks_before order

  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n) {
    n = static_cast<size_t>(params_.top_k);
    std::partial_sort(cands.begin(), cands.begin() + n, cands.end(), before);
    sorted = true;
    mass = 0.0;
    for (size_t i = 0; i < n; ++i) mass += cands[i].weight;
  }

  if (params_.top_p < 1.0f) {
    const double target = double(params_.top_p) * mass;
    if (sorted) {  // top-k left a short sorted list: walk it
      double cum = 0.0;
      for (size_t i = 0; i < n; ++i) {
        cum += cands[i].weight;
        if (cum >= target) {
          n = i + 1;  // the token that crosses top_p is kept
          break;
        }
      }
    } else {
      n = cut_top_p(cands.data(), n, max_logit, target);
    }
  }

  if (params_.min_p > 0.0f) {
    // The max logit always survives the earlier filters and has weight exactly
    // 1, so p >= min_p * p_max is weight >= min_p.
    const float min_w = params_.min_p;
    auto end = std::remove_if(cands.begin(), cands.begin() + n,
                              [min_w](const Candidate& c) { return c.weight < min_w; });
    n = static_cast<size_t>(end - cands.begin());
  }
  cands.resize(n);

  double kept = 0.0;
  if (params_.temperature != 1.0f) {
    const float inv_t = 1.0f / params_.temperature;
    for (auto& c : cands) {
      c.weight = std::exp((c.logit - max_logit) * inv_t);
      kept += c.weight;
    }
  } else {
    for (const auto& c : cands) kept += c.weight;
  }
  return kept;
}

SampleResult Sampler::sample(std::span<const float> raw, const uint32_t* allowed) {
  if (raw.empty()) return {-1, kNegInf, {}};
  const std::span<const float> logits = adjust(raw, adjusted_, allowed);
  const MaxInfo max = find_max(logits);
  if (max.logit == kNegInf) {
    // Every token masked: nothing is sampleable. Return the lowest id rather
    // than computing NaNs; the caller's length/eos logic ends the sequence.
    return {max.id, kNegInf, {}};
  }

  SampleResult r;
  const bool lp = params_.logprob || params_.n_logprobs > 0;
  int32_t chosen = max.id;
  double log_z = 0.0;
  if (params_.temperature == 0.0f) {
    if (!lp) return {chosen, std::numeric_limits<float>::quiet_NaN(), {}};
    log_z = std::log(partition(logits, max.logit));
  } else {
    double full_mass = 0.0;
    const double kept = filter(logits, max.logit, cands_, &full_mass);
    log_z = std::log(full_mass);
    // 53 random bits -> a uniform double in [0, 1), the same on every platform
    // (std::uniform_real_distribution is not specified bit-for-bit).
    const double u = double(rng_() >> 11) * 0x1.0p-53;
    const double target = u * kept;
    double cum = 0.0;
    for (const auto& c : cands_) {
      if (c.weight <= 0.0f) continue;
      chosen = c.id;  // the last positive one stays chosen if rounding lets cum fall short
      cum += c.weight;
      if (cum > target) break;
    }
    if (!lp) return {chosen, std::numeric_limits<float>::quiet_NaN(), {}};
  }

  // Logprobs describe the model, not the request's adjustments (vLLM's
  // default raw_logprobs): recompute the partition over the raw row.
  float lp_max = max.logit;
  if (adjusts_ || allowed != nullptr) {
    lp_max = find_max(raw).logit;
    log_z = lp_max == kNegInf ? 0.0 : std::log(partition(raw, lp_max));
  }
  r.id = chosen;
  r.logprob = lp_max == kNegInf ? kNegInf : static_cast<float>(double(raw[chosen]) - double(lp_max) - log_z);
  r.top = top_logprobs(raw, params_.n_logprobs, lp_max, log_z);
  return r;
}

std::vector<double> Sampler::distribution(std::span<const float> raw) const {
  std::vector<double> out(raw.size(), 0.0);
  if (raw.empty()) return out;
  std::vector<float> buf;
  const std::span<const float> logits = adjust(raw, buf, nullptr);
  const MaxInfo max = find_max(logits);
  if (params_.temperature == 0.0f || max.logit == kNegInf) {
    out[max.id] = 1.0;
    return out;
  }
  std::vector<Candidate> cands;
  double full_mass = 0.0;
  const double kept = filter(logits, max.logit, cands, &full_mass);
  for (const auto& c : cands) out[c.id] = c.weight / kept;
  return out;
}

}  // namespace agentkv
