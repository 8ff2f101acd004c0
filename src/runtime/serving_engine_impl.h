// The serving engine's private declarations, shared by its source files:
// serving_engine.cpp (submission, the loop, steps), serving_engine_create.cpp
// (construction), serving_engine_events.cpp (logits to tokens, events and
// finish), serving_engine_shared.cpp (rows of the schemes whose K/V every
// agent shares), serving_engine_reuse.cpp and serving_engine_defer.cpp
// (segment reuse's rows and whole-prompt selection), serving_engine_segments.cpp
// (frozen segments). Parts with their own state are classes of their own:
// the remote KV tier's client (remote_tier_client.h), the redo-layer
// schemes' owner tags (owner_tags.h), relay's captures (captures.h) and the
// segment lookup and copies (segment_reuse.h).
// Nothing outside src/runtime includes it; the public face is
// include/agentkv/serving.h.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "adapter/registry.h"
#include "agentkv/constraint.h"
#include "agentkv/serving.h"
#include "backend/backend.h"
#include "kv/kv_component.h"
#include "kv/kv_manager.h"
#include "kv/kv_scratch.h"
#include "kv/kv_storage.h"
#include "kv/lr_storage.h"
#include "runtime/kv_event_source.h"
#include "runtime/loaded_model.h"
#include "runtime/mask_worker.h"
#include "runtime/captures.h"
#include "runtime/owner_tags.h"
#include "runtime/prompt_deferral.h"
#include "runtime/remote_tier_client.h"
#include "runtime/runner.h"
#include "runtime/sampler.h"
#include "runtime/segment_jobs.h"
#include "runtime/segment_reuse.h"
#include "runtime/token_output.h"
#include "sched/scheduler.h"
#include "sharing/scheme.h"
#include "sharing/scheme_defaults.h"
#include "util/file_id.h"
#include "runtime/request_hooks.h"

namespace agentkv {

namespace serving_detail {

using Clock = std::chrono::steady_clock;

// Seconds on the steady clock: session expiry times.
inline double clock_seconds() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

inline double seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// One request's state, the only one (nano-vllm's Sequence): the scheduler
// sees its SchedRequest part (tokens, progress, cache keys), the planner
// (`plan`) holds the scheme's part, and the rest turns its logits into
// events. Made at submission, owned by the engine (inbox_, then live_) until
// it finishes; the scheduler (while it is queued or running) and the remote
// KV tier's wait list (while its blocks are fetched) hold it by pointer.
struct Live : SchedRequest {
  ServeSink sink;
  TokenOutput out;  // its logits rows to tokens and text (runtime/token_output.h)
  int32_t prompt_logprobs = -1;
  bool return_logits = false;
  std::vector<SampleResult> prompt_lps;  // by prompt position - 1; id -1 until scored
  // (SchedRequest::background: counted in no stats.)
  Clock::time_point submitted;
  bool scheduled = false;  // left the queue (counts against max_queue until then)
  bool first_sent = false;
  double queue_s = 0;
  double ttft_s = 0;
  std::shared_ptr<const Adapter> adapter;  // keeps an unloaded adapter alive until the request ends
  // The request's planner (SharingScheme::admit): its scheme's decision
  // (plan->sharing()) and per-request state. Never null once admitted.
  std::unique_ptr<SeqPlanner> plan;
  std::string model;                       // adapter name, "" = base (stats key)
  // Segment reuse (plan->reuses_segments(); runtime/segment_reuse.h).
  ReuseState reuse;
  bool capture = false;                    // captures (runtime/captures.h): hidden state, influence
  // Whole-prompt selection (SeqPlanner::whole_prompt_layer;
  // runtime/prompt_deferral.h): the deferred chunks' states, the split
  // step's verdicts and the kept rows still to run.
  PromptDeferral defer;
  std::function<void(const ServeRequestHooks::KvProbe&)> kv_probe;
  int64_t prefill_token_layers = 0;
  std::string session_key;                 // agent session, scoped to the tenant; "" = none
  double session_retention_s = 0;

  Live(ServeSink s, const ServeRequest& r, const Tokenizer& tok, Clock::time_point t)
      : sink(std::move(s)),
        out(r, tok, request_hooks(r).forced_tokens),
        prompt_logprobs(r.prompt_logprobs),
        return_logits(request_hooks(r).return_logits),
        submitted(t),
        kv_probe(request_hooks(r).kv_probe) {
    tokens = r.prompt;
    n_prompt = static_cast<int32_t>(r.prompt.size());
    read_cache = r.prompt_logprobs < 0;  // prompt logprobs need every prompt row's logits
    one_per_step_from = request_hooks(r).one_per_step_from;
    background = request_hooks(r).background;
    if (!r.session_id.empty()) {
      session_key = agentkv::session_key(r.tenant, r.session_id);
      session_retention_s = r.session_retention_s;
    }
    if (prompt_logprobs >= 0) prompt_lps.assign(r.prompt.size() - 1, SampleResult{-1, 0.0f, {}});
  }
};

// A Step row with logits, in row order (the runner's output order).
struct LogitRow {
  ServeId id;
  int32_t prompt_pos;  // >= 0: scores prompt token prompt_pos + 1; -1: the row to sample from
};

// One step as the engine plans it: the runner's Step, the rows with logits
// in row order (the runner's output order), and per Step sequence its
// scheme (metrics; null for background requests), its request when the
// chunk is prompt (prefill counts), and its request.
struct StepPlan {
  Step step;
  std::vector<LogitRow> logit_rows;
  std::vector<const char*> seq_scheme;
  std::vector<Live*> seq_live;
  std::vector<Live*> seq_req;
};

}  // namespace serving_detail

using serving_detail::Clock;
using serving_detail::clock_seconds;
using serving_detail::Live;
using serving_detail::LogitRow;
using serving_detail::seconds;
using serving_detail::StepPlan;

class ServingEngineImpl final : public ServingEngine {
 public:
  static Result<std::unique_ptr<ServingEngineImpl>> create(const ServingOptions& opts);
  ~ServingEngineImpl() override;

  Result<ServeId> submit(ServeRequest req, ServeSink sink) override;
  void cancel(ServeId id) override;
  bool drain(double timeout_s) override;
  ServingStats stats() const override;
  const Tokenizer& tokenizer() const override { return *tokenizer_; }
  int32_t max_model_len() const override { return max_model_len_; }
  int32_t vocab_size() const override { return model_->spec.n_vocab; }
  int32_t n_layers() const override { return model_->spec.n_layers; }
  Status load_adapter(const std::string& name, const std::string& path, const std::string& kind) override;
  Status unload_adapter(const std::string& name) override;
  std::vector<ServedModel> models() const override;
  Result<SegmentInfo> create_segment(const SegmentSpec& spec) override;
  Status delete_segment(const std::string& id, const std::string& tenant) override;
  std::vector<SegmentInfo> list_segments(const std::string& tenant) override;
  std::vector<SegmentSpec> frozen_segment_specs() override;

 private:
  ServingEngineImpl() = default;
  // create()'s parts: the options' ranges; each scheme's server defaults
  // (from its profile, checked) and the KV components it declares; the KV
  // pool, those components and the LR cache sized from one memory budget.
  static Status check_options(const ServingOptions& opts);
  Status configure_schemes();
  Status allocate_kv(KvDType kv_dtype);
  void loop();
  // submit()'s checks of the request itself: tokens in the vocabulary,
  // sampling parameters, and room for the prompt in the context and the pool.
  Status check_request(const ServeRequest& req) const;
  // A submitted request becomes the scheduler's (or waits on the remote tier).
  void admit(std::unique_ptr<Live> l);
  // The remote tier's answers and ended waits: their requests to the scheduler, counts to the stats.
  void poll_remote();
  // What the schedule did to requests besides running them: preempted ones
  // drop their deferred state; dropped and aborted ones finish.
  void settle(const SchedulerOutput& out);
  void take_inbox(std::vector<std::unique_ptr<Live>>* fresh, std::vector<ServeId>* cancels, bool* cancel_all);
  void run_step(const SchedulerOutput& out);
  // run_step's parts: each scheduled chunk's rows (plan_rows, plan_reuse or
  // plan_resume), and after the forward pass: captures, owners, stats, and
  // the logits turned into tokens and events.
  void plan_step(const SchedulerOutput& out, StepPlan* plan);
  void after_step(const SchedulerOutput& out, const StepPlan& plan, const StepOutput& so);
  // Segment reuse for one scheduled chunk of a request whose planner reuses
  // segments (SeqPlanner::reuses_segments): finds the cached segments of its
  // prompt (first chunk) and queues the chunk's K/V copies (reuse_), and
  // adds the planner's rows and hooks to the step.
  void plan_reuse(const ScheduledSeq& s, Live& l, int32_t adapter_index, Step* step);
  // plan_reuse's parts: the rows the planner wants (returns each position's
  // row, -1 for none); its hooks as LayerHooks; profilers' probes.
  std::vector<int32_t> add_reuse_rows(const ScheduledSeq& s, Live& l, int32_t cb, int32_t sel,
                                      std::vector<ReuseRow>& want, int32_t adapter_index,
                                      const std::vector<int32_t>& blocks, Step* step);
  void add_reuse_hooks(Live& l, std::vector<ReuseHook> hooks, int32_t seq_index, int32_t cb, int32_t e,
                       const std::vector<int32_t>& row_of, Step* step) const;
  void add_kv_probes(Live& l, int32_t seq_index, Step* step) const;
  // After a prompt row with logits, a request with ICaRus decoder rows takes
  // the logits to its decoder row, appended right after it.
  void add_decoder_row(const Live& l, int32_t adapter_index, Step* step) const;
  // Prompt position p of a request as a row (token, slot, weights); the caller sets its layers.
  TokenRow prompt_row(const Live& l, const SchedRequest& r, const std::vector<int32_t>& blocks, int32_t p,
                      int32_t adapter_index) const;
  // Whole-prompt selection (serving_engine_defer.cpp). The layer the
  // request's planner selects at over the whole prompt, or -1 (per chunk).
  int32_t whole_prompt_layer(const Live& l) const;
  // A chunk before the prompt's last: its rows run up to the selection
  // layer and their hidden states wait in the scratch. False, with nothing
  // added, when the pool cannot lend the scratch (the request then selects
  // per chunk).
  bool defer_chunk(const ScheduledSeq& s, Live& l, int32_t sel, int32_t adapter_index, StepSeq q, Step* step);
  // The last chunk's rows [row_begin, rows.size()) with hooks at
  // hook_layers: when they exceed the step's budget, they stop above the
  // last hook, capturing their state there, and the kept ones wait for
  // plan_resume (SchedRequest::pending_work).
  void split_rows(Live& l, SchedRequest* r, int32_t row_begin, int32_t last_hook, Step* step);
  // After the split step: keeps the rows its hooks kept, and asks the scheduler for their work.
  void after_split(Live& l, SchedRequest* r);
  // A share of pending work: the next kept rows, from the resume layer, within s.work token rows.
  void plan_resume(const ScheduledSeq& s, Live& l, int32_t adapter_index, Step* step,
                   std::vector<LogitRow>* logit_rows);
  // Turns one logits row into a token and an event; finishes when it should.
  // A request's prompt in the stats, at its first token (not background ones).
  void count_prompt(const Live& l, const ServeEvent& ev);
  void on_logits(ServeId id, std::span<const float> logits);
  Status end_session(const std::string& tenant, const std::string& id) override;
  // Scores prompt token pos + 1 from the logits row of position pos.
  void on_prompt_logits(ServeId id, int32_t pos, std::span<const float> logits);
  void finish(ServeId id, ServeFinish why, ServeEvent ev = {});
  void mark_scheduled(ServeId id, Live& l);
  // K/V entries of the prompt positions the request prefilled (not served
  // by the prefix cache), and those of them copied instead of computed
  // (0 without segment reuse); their ratio is ServeEvent::reuse_rate.
  int64_t prefilled_entries(const Live& l, int32_t cached) const {
    return int64_t{l.n_prompt - cached} * model_->spec.n_layers;
  }
  int64_t reused_entries(const Live& l, int32_t cached) const {
    return l.reuse.reused_tokens == 0 ? 0 : std::max<int64_t>(0, prefilled_entries(l, cached) - l.prefill_token_layers);
  }
  double reuse_rate(const Live& l, int32_t cached) const {
    const int64_t all = prefilled_entries(l, cached);
    return all > 0 ? static_cast<double>(reused_entries(l, cached)) / static_cast<double>(all) : 0.0;
  }
  void publish_stats();
  // Hands the KV cache events of the last step to opts_.kv_events.
  void flush_kv_events();
  // KvEventSource::Readers: the models whose requests can hit a block of `lineage`.
  std::vector<std::optional<std::string>> lineage_readers(const std::string& lineage) const;
  // Runs fn on the engine thread (the KV manager's owner) and waits for it.
  // kUnavailable once the engine is stopping.
  Status run_on_engine(std::function<void()> fn);
  void run_tasks();
  // The rows of a chunk that does no segment reuse (serving_engine_shared.cpp
  // for what the shared-K/V schemes add): the scheme's RowSpecs as TokenRows,
  // with the component pool's slots (LRAgent's LR rows) and rows that keep
  // cached K/V, and the redo rows (owners_) for tokens another agent wrote.
  // Appends one StepSeq.
  void plan_rows(const ScheduledSeq& s, Live& l, int32_t adapter_index, Step* step, std::vector<LogitRow>* logit_rows);
  // After a step: the hidden states its rows captured, into the captures'
  // or owner snapshots' component or a deferred chunk's request, and the
  // influence its decode rows gave.
  void store_captures(const Step& step, const StepOutput& so, const std::vector<Live*>& seq_of);

  ServingOptions opts_;
  std::shared_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<backend_i> backend_;
  std::unique_ptr<KvStorage> storage_;
  std::unique_ptr<KvManager> kv_;
  // LRAgent's LR cache: its storage and its own pool and prefix index (null
  // with --lr-cache-rank 0).
  std::unique_ptr<LrStorage> lr_storage_;
  std::unique_ptr<KvManager> lr_kv_;
  // The KV components the schemes declared (configure_schemes); the
  // engine's features that use them hold them by role: owners_ and captures_.
  KvComponentRegistry components_;
  // Per-model defaults of the schemes' parameters (opts_.scheme_defaults),
  // between the server's options and the schemes' own.
  SchemeDefaults scheme_defaults_;
  // The model file's content id, hashed once when first asked for (the
  // defaults file and the remote tier's tag both key on it).
  Result<std::string> model_content_id();
  std::string model_id_;
  OwnerTags owners_;      // the redo-layer schemes' owner tags and snapshots
  Captures captures_;     // relay's hidden states and influence scores
  SegmentReuse reuse_;    // segment lookup and copies
  // Whole-prompt selection's hidden states, in blocks of the KV pool.
  std::unique_ptr<KvScratch> defer_;
  std::unique_ptr<Runner> runner_;
  std::unique_ptr<KvEventSource> kv_events_;  // null unless opts_.kv_events is set
  BlockObservers observers_;                   // what the KV pool tells of its prefix index

  // The remote KV tier's client (remote_tier_client.h), when opts_.kv_remote.
  std::unique_ptr<RemoteTierClient> remote_;
  MaskWorker mask_worker_;
  std::unique_ptr<Scheduler> sched_;
  AdapterRegistry adapters_;  // thread-safe: HTTP threads load/unload, submit() looks up
  const SharingScheme* default_scheme_ = nullptr;
  int32_t max_model_len_ = 0;

  // Engine thread only.
  std::unordered_map<ServeId, std::unique_ptr<Live>> live_;
  std::vector<float> logits_;
  SegmentJobs segment_jobs_;  // frozen segments' prefills under way

  // Shared, under mu_.
  mutable std::mutex mu_;
  std::condition_variable wake_;  // the engine thread: work arrived
  std::condition_variable idle_;  // drain(): a request finished
  std::vector<std::unique_ptr<Live>> inbox_;
  std::vector<ServeId> cancels_;
  std::vector<std::function<void()>> tasks_;  // run_on_engine
  bool cancel_all_ = false;
  bool draining_ = false;
  bool stopping_ = false;
  ServeId next_id_ = 1;
  int32_t n_queued_ = 0;  // submitted, not yet scheduled
  int32_t n_live_ = 0;    // submitted, not yet finished
  ServingStats stats_;

  std::thread thread_;
};

}  // namespace agentkv
