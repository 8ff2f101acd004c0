// One request's whole-prompt selection under chunked prefill: the piece a
// planner asks for by naming its selection layer (SeqPlanner::
// whole_prompt_layer; sparsex and cacheblend do). The serving engine drives
// it (serving_engine_defer.cpp); this class holds its state and rules, and
// knows no scheme.
//
//  - Deferring: every chunk before the prompt's last runs its positions up
//    to the selection layer and stops. The hidden state each stops with is
//    a row of a KvScratch (blocks lent by the KV pool, so it counts against
//    the KV budget), at position - begin().
//  - Splitting: when the last chunk's step would exceed the step budget, its
//    rows stop above the last hook (the resume layer) instead, capturing
//    their state there. The hooks' verdicts say which rows are kept.
//  - Resuming: the kept rows run from the resume layer in later steps, in
//    position order, within each step's budget. Position order keeps it
//    exact: a row's keys at every layer are written by rows of the same or
//    earlier steps.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/kv_scratch.h"
#include "runtime/step.h"

namespace agentkv {

class PromptDeferral {
 public:
  // Positions [begin, n_prompt) wait in `scratch` under `holder` from now
  // on (a no-op once started). False when the pool cannot lend the rows:
  // the request then selects per chunk for good (off()).
  bool start(KvScratch* scratch, RequestId holder, int32_t begin, int32_t n_prompt);
  bool started() const { return begin_ >= 0; }
  bool off() const { return off_; }
  // The first deferred position (-1 before start).
  int32_t begin() const { return begin_; }

  // Whether this step's captures of the request go to the scratch; reset
  // by the caller once it has stored them.
  bool capturing() const { return capturing_; }
  void set_capturing(bool on) { capturing_ = on; }
  // A deferred position's hidden state (d_model floats), in and out.
  void put(int32_t pos, const float* h);
  void get(int32_t pos, float* dst) const;

  // The last chunk's rows [row_begin, rows.size()) of `step`, whose hooks'
  // last layer is last_hook: when their layers exceed max_token_layers,
  // they stop at last_hook + 1 and capture their state there, and this
  // becomes the split step. An ICaRus-style decoder row (slot < 0) at the
  // end waits for its encoder row: it is removed, and the row before it
  // takes the logits. Returns whether the rows were split.
  bool split(Step* step, int32_t row_begin, int32_t last_hook, int32_t n_layers, int64_t max_token_layers,
             int32_t n_prompt);
  bool splitting() const { return splitting_; }
  // During the split step: a hook dropped the row at `pos`.
  void drop(int32_t pos);
  // After the split step: keeps the rows its hooks kept, and gives the
  // scratch back when none is left.
  void after_split();

  // Kept rows still to run, as token rows' worth of layers (rounded up).
  int32_t pending_work(int32_t n_layers) const;
  // The next kept row, if its layers fit what is left of `budget`
  // token-layers (the first of a share always fits): its position and the
  // layers it runs, [resume_layer(), *layer_end). *spent grows by its cost.
  bool take(int64_t budget, int64_t* spent, int32_t* pos, int32_t* layer_end);
  int32_t resume_layer() const { return resume_layer_; }
  bool resuming() const { return resume_layer_ >= 0; }
  bool all_taken() const { return next_ == resume_pos_.size(); }

  // Drops the deferred state and gives the scratch back (off() stays).
  void release();

 private:
  KvScratch* scratch_ = nullptr;
  RequestId holder_ = 0;
  int32_t begin_ = -1;
  bool off_ = false;
  bool capturing_ = false;
  bool splitting_ = false;
  // The kept rows: positions (ascending) and layer ends (never kAllLayers),
  // the next to run, and the hooks' verdicts by position - begin_ while the
  // split step runs.
  int32_t resume_layer_ = -1;
  std::vector<int32_t> resume_pos_, resume_end_;
  size_t next_ = 0;
  std::vector<uint8_t> keep_;
};

}  // namespace agentkv
