// `relay` (RelayCaching, docs/scheme_algorithms.md §3.3; paper §4.3): the prompt's reused
// tokens (typically an upstream agent's output, whose K/V and hidden states
// were kept while it was decoded) are recomputed only in a band of layers:
//   - layers [0, l_start): the copied K/V as they are;
//   - layers [l_start, l_det]: every reused token, resumed from its hidden
//     state entering l_start (a KV component the engine captured);
//   - at l_det the hook compares each reused token's fresh V with the copied
//     V, d_j = 1 - mean over KV heads of cos(v, v_cached), and selects
//       d_j >= dev_threshold x mean(d)                 (I_dev),
//       influence_j >= influence_threshold x mean(influence)  (I_inf),
//       the last suffix_tokens reused tokens of each run (I_suffix);
//     and the first prefix_tokens of each run recompute every layer, as
//     epic's first tokens do (relay with epic's tokens: an ablation of ours,
//     0 by default);
//   - layers (l_det, l_end): the selected tokens only;
//   - layers [l_end, L): the copied K/V again.
// Tokens not reused run every layer. A reused token without a snapshot at
// l_start (captures off, or the snapshot lost) runs from layer 0 instead,
// which only computes more.
// Choices of ours, where the paper is silent:
//   - the means are over the reused tokens of the scheduled chunk (the
//     paper prefills in one pass); the influence mean only over those with
//     a score: tokens that were generated (the paper reuses nothing else,
//     we also reuse prompt-phase K/V, which has no influence score and is
//     selected by deviation and suffix only);
//   - the suffix is per reused run: each relayed segment ends somewhere;
//   - prefix_tokens' rows count in the deviation mean at l_det like any
//     reused row (they are always kept, so only the cut moves);
//   - cosines are per KV head (the paper's "1/H sum over heads").
// Exact limit: l_start = 0, l_end = L and both thresholds 0 select every
// reused token in every layer, which is full prefill (bitwise).
// l_start == l_end recomputes nothing: direct reuse (naive).
#include <algorithm>
#include <cmath>

#include "agentkv/serving.h"
#include "sharing/relay_profile.h"
#include "sharing/scheme_reuse_common.h"
#include "util/file_id.h"

namespace agentkv {

namespace {

class RelayPlanner final : public SeqPlanner {
 public:
  explicit RelayPlanner(const RelayConfig& c) : SeqPlanner(true), c_(c) {}
  bool captures_state() const override { return true; }

  void plan_chunk(const ReuseChunk& c, std::vector<ReuseRow>* rows, std::vector<ReuseHook>* hooks) override {
    if (c_.l_start >= c_.l_end) return;  // an empty band: direct reuse
    std::vector<uint8_t> selected(c.n, 0);  // influence and suffix tokens, known before the hook
    double inf_sum = 0;
    int32_t n_reused = 0, n_scored = 0;  // reused, and reused with an influence score
    int32_t to_run_end = 0;  // reused positions after this one in its run (within the chunk)
    for (int32_t i = c.n - 1; i >= 0; --i) {
      if (!c.reused[i]) continue;
      ++n_reused;
      const bool run_goes_on = i + 1 < c.n ? c.reused[i + 1] != 0 : c.reused_after;
      to_run_end = !run_goes_on ? 0 : i + 1 < c.n ? to_run_end + 1 : c_.suffix_tokens;
      if (to_run_end < c_.suffix_tokens) selected[i] = 1;
      if (!c.influence.empty() && c.influence[i] > 0) inf_sum += c.influence[i], ++n_scored;
    }
    if (n_reused == 0) return;
    for (int32_t i = 0; i < c.n; ++i) {
      if (!c.reused[i]) continue;
      if (c.begin + i - c.run_start[i] < c_.prefix_tokens) {
        rows->push_back(ReuseRow{c.begin + i, 0, -1});  // -1: to the last layer
        selected[i] = 1;
        continue;
      }
      const bool resume = c_.l_start > 0 && c.hidden_layer == c_.l_start && !c.has_hidden.empty() && c.has_hidden[i];
      rows->push_back(ReuseRow{c.begin + i, resume ? c_.l_start : 0, c_.l_end});
      // tau_inf 0 selects every token, captured influence or not.
      const float inf = c.influence.empty() ? 0.0f : c.influence[i];
      if (c_.influence_threshold <= 0 || (inf > 0 && inf >= c_.influence_threshold * inf_sum / n_scored)) {
        selected[i] = 1;
      }
    }
    ReuseHook h;
    h.layer = c_.l_det;
    std::vector<uint8_t> reused(c.reused.begin(), c.reused.end());
    const int32_t begin = c.begin;
    const double dev_threshold = c_.dev_threshold;
    h.fn = [reused = std::move(reused), selected = std::move(selected), begin, dev_threshold](
               const ReuseHookView& v, std::span<uint8_t> keep) {
      if (dev_threshold <= 0) return;  // tau_dev 0 selects every token
      const int64_t hd = v.head_dim > 0 && v.kv_dim % v.head_dim == 0 ? v.head_dim : v.kv_dim;
      std::vector<float> dev(v.pos.size(), 0.0f);
      double sum = 0;
      int32_t n = 0;
      for (size_t i = 0; i < v.pos.size(); ++i) {
        const int32_t at = v.pos[i] - begin;
        if (at < 0 || at >= static_cast<int32_t>(reused.size()) || !reused[at]) continue;
        dev[i] = value_deviation(v.v + i * v.kv_dim, v.cached_v + i * v.kv_dim, v.kv_dim, hd);
        sum += dev[i];
        ++n;
      }
      const double cut = n > 0 ? dev_threshold * sum / n : 0.0;
      for (size_t i = 0; i < v.pos.size(); ++i) {
        const int32_t at = v.pos[i] - begin;
        if (at < 0 || at >= static_cast<int32_t>(reused.size()) || !reused[at] || selected[at]) continue;
        if (!(dev[i] >= cut)) keep[i] = 0;
      }
    };
    hooks->push_back(std::move(h));
  }

 private:
  RelayConfig c_;
};

class SchemeRelay final : public ReuseScheme {
 public:
  const char* name() const override { return "relay"; }
  Status check_params(const KvSharingParams& p) const override {
    AKV_RETURN_IF_ERROR(check_reuse_params(name(), {.relay = true}, p));
    return check_order(p);
  }
  Status check_model(const KvSharingParams& p, int32_t n_layers) const override {
    if (!p.l_start || !p.l_det || !p.l_end) {
      return make_error(ErrorCode::kInvalidArgument,
                        "kv_sharing relay needs its layers l_start, l_det and l_end: pass them, or start the server "
                        "with --relay-profile (agentkv profile-relay makes one for a model)");
    }
    if (*p.l_end > n_layers) {
      return make_error(ErrorCode::kInvalidArgument, "kv_sharing l_end ", *p.l_end, " is past the model's ", n_layers,
                        " layers");
    }
    return check_order(p);
  }
  // The server's relay layers from --relay-profile (the request's own win),
  // checked; the captures' components: the influence score, and the hidden
  // state entering l_start where snapshots are kept (elsewhere a reused
  // token resumes from layer 0).
  Status configure_server(const ServerSchemeContext& c, KvSharingParams* d,
                          KvComponentRegistry* components) const override {
    const ServingOptions& o = *c.opts;
    if (o.relay_capture != "off" && o.relay_capture != "on-request" && o.relay_capture != "all") {
      return make_error(ErrorCode::kInvalidArgument, "--relay-capture must be off, on-request or all; got '",
                        o.relay_capture, "'");
    }
    if (!o.relay_profile.empty()) {
      AKV_ASSIGN_OR_RETURN(std::string model_id, file_content_id(o.model_path));
      AKV_ASSIGN_OR_RETURN(RelayProfile rp, load_relay_profile(o.relay_profile, model_id, c.n_layers));
      if (!d->l_start) d->l_start = rp.l_start;
      if (!d->l_det) d->l_det = rp.l_det;
      if (!d->l_end) d->l_end = rp.l_end;
    }
    if (d->l_start || d->l_det || d->l_end) {
      // Only relay's own fields: the other schemes' defaults sit beside them.
      KvSharingParams only;
      only.l_start = d->l_start;
      only.l_det = d->l_det;
      only.l_end = d->l_end;
      only.dev_threshold = d->dev_threshold;
      only.influence_threshold = d->influence_threshold;
      only.suffix_tokens = d->suffix_tokens;
      only.prefix_tokens = d->prefix_tokens;
      only.min_segment_tokens = d->min_segment_tokens;
      AKV_RETURN_IF_ERROR(check_params(only).with_context("relay defaults"));
      AKV_RETURN_IF_ERROR(check_model(only, c.n_layers).with_context("relay defaults"));
    }
    if (o.relay_capture == "off") return Status::ok();
    AKV_RETURN_IF_ERROR(components->declare(
        {ComponentRole::kCaptureInfluence, 1, -1, /*every_request=*/o.relay_capture == "all"}));
    // Snapshots are kept at the server's l_start; a request asking for
    // another one resumes from layer 0.
    if (o.relay_snapshots && d->l_start && *d->l_start > 0) {
      AKV_RETURN_IF_ERROR(components->declare({ComponentRole::kCaptureHidden, c.d_model, *d->l_start}));
    }
    return Status::ok();
  }
  std::unique_ptr<SeqPlanner> make_planner(const KvSharingParams& p) const override {
    RelayConfig c;
    c.l_start = p.l_start.value_or(0);
    c.l_det = p.l_det.value_or(0);
    c.l_end = p.l_end.value_or(0);
    c.dev_threshold = p.dev_threshold.value_or(kRelayDefaultDevThreshold);
    c.influence_threshold = p.influence_threshold.value_or(kRelayDefaultInfluenceThreshold);
    c.suffix_tokens = p.suffix_tokens.value_or(kRelayDefaultSuffixTokens);
    c.prefix_tokens = p.prefix_tokens.value_or(0);
    return make_relay_planner(c);
  }

 private:
  static Status check_order(const KvSharingParams& p) {
    if (p.l_start && p.l_end && *p.l_start == *p.l_end) return Status::ok();  // empty band: l_det unused
    if (p.l_start && p.l_det && *p.l_det < *p.l_start) {
      return make_error(ErrorCode::kInvalidArgument, "kv_sharing relay layers must satisfy l_start <= l_det < l_end; got "
                                                     "l_start ", *p.l_start, ", l_det ", *p.l_det);
    }
    if (p.l_det && p.l_end && *p.l_end <= *p.l_det) {
      return make_error(ErrorCode::kInvalidArgument, "kv_sharing relay layers must satisfy l_start <= l_det < l_end; got "
                                                     "l_det ", *p.l_det, ", l_end ", *p.l_end);
    }
    if (p.l_start && p.l_end && *p.l_end < *p.l_start) {
      return make_error(ErrorCode::kInvalidArgument, "kv_sharing relay layers must satisfy l_start <= l_end; got l_start ",
                        *p.l_start, ", l_end ", *p.l_end);
    }
    return Status::ok();
  }
};

}  // namespace

std::unique_ptr<SeqPlanner> make_relay_planner(const RelayConfig& c) {
  return std::make_unique<RelayPlanner>(c);
}

const SharingScheme* sharing_scheme_relay_instance() {
  static const SchemeRelay s;
  return &s;
}

}  // namespace agentkv
