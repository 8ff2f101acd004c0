// One request's planner (docs/design.md §2-3): a scheme admits a request
// (SharingScheme::admit) and returns this object, which holds everything the
// scheme decided for it and all its per-request state, from admission to
// finish. The engine asks it, and nothing else, what to do:
//   - the cache-key policy of the request's blocks (which lineage each block
//     carries, so what it may share, and which component pool it holds),
//     handed on to the KV manager as an opaque CacheKeyPolicy;
//   - the rows of each scheduled chunk: one row per token with the adapter's
//     weights or the base's, plus ICaRus's paired decoder row
//     (chunk_rows), and for the segment-reuse schemes the reused positions
//     to recompute, in which layers, with the hooks that select them
//     (plan_chunk);
//   - whether one selection spans the whole prompt (whole_prompt_layer);
//   - the rows that redo cached tokens another agent wrote (redo_rows) and
//     the LR rows of LRAgent (chunk_rows' write_lr);
//   - what it keeps after a step (captures_state; the engine keeps owner
//     tags for SeqSharing::redo_layers).
// Schemes know nothing of kernels or blocks: they decide per token index and
// position, and the engine turns their decisions into a Step's rows.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "adapter/adapter.h"
#include "kv/cache_key_policy.h"
#include "sharing/reuse.h"

namespace agentkv {

inline constexpr int32_t kNever = std::numeric_limits<int32_t>::max();

// One request's sharing decision, made once at submission.
struct SeqSharing {
  const char* scheme =
      "none";  // the scheme that decided (a scheme falls back to none's rules for other kinds)
  const Adapter* adapter =
      nullptr;  // nullptr: the base model; the engine keeps it alive while the request is
  // Tokens at index >= weights_from run with the adapter's weights in the
  // rows that write KV; earlier ones with the base weights. kNever: all base.
  int32_t weights_from = kNever;
  // KV blocks that end at or before lineage_from carry the base lineage
  // (shareable with the base and other adapters); later blocks carry the
  // adapter's. kNever: every block is base lineage.
  int32_t lineage_from = kNever;
  // ICaRus: every sampled position also runs a decoder row (adapter weights,
  // writes no KV, reads the encoder's KV at positions 0..p) that gives the
  // logits; the encoder row of that token only writes KV.
  bool decoder_row = false;
  // The schemes whose K/V any agent writes and any agent reads (FullShared,
  // DroidSpeak, LRAgent's base K/V; docs/scheme_algorithms.md §1.2-1.3): every block carries
  // this lineage tag instead of the base's or the adapter's, so approximate
  // K/V another agent wrote never serves an exact scheme. Empty: the rules
  // above.
  std::string shared_lineage;
  // LRAgent: the v_proj LoRA's X·A^T lives in the LR cache under this
  // lineage (BaseShared: the adapter's content id; BaseLRShared: its shared-A
  // group's), the K/V cache holds V without it, and attention reads V_base
  // + scale · V_lr · B. Tokens with cached K/V but no LR row of this lineage
  // run the adapter's forward and write only the LR row (the "LR prefill").
  // Empty: no LR cache.
  std::string lr_lineage;
  // lragent-baselr for an adapter in no shared-A group: BaseShared rules.
  bool lr_fallback = false;
  // Redo layers, ascending (DroidSpeak's critical layers): at each admission,
  // the cached tokens that another agent wrote (the KV pool's owner tags)
  // are run again with this request's weights from the first of them on,
  // writing K/V only in them. Empty: none.
  std::vector<int32_t> redo_layers;
};

// One row the engine must put in a Step for tokens [begin, begin + n) of a
// sequence: the token at index `index`, with the adapter's weights or the
// base's, writing its K/V or not, with logits or not.
struct RowSpec {
  int32_t index = 0;
  bool adapter = false;
  bool write_kv = true;
  bool logits = false;
  // LRAgent: the row writes its LR row (X·A^T of the adapter's v_proj) to
  // the request's LR blocks. With write_kv false beside it, the token's base
  // K/V is cached and kept: the "LR prefill" row.
  bool write_lr = false;
  // A redo row: a cached token run again with the adapter's weights,
  // writing K/V only in SeqSharing::redo_layers.
  bool redo = false;
};

// What the rows of a scheduled chunk depend on besides the scheme's
// decision: tokens [begin, begin + n), sampled after the last or not, and
// the request's admission (its preemption count) with the K/V prefix it hit.
struct ChunkSpan {
  int32_t begin = 0;
  int32_t n = 0;
  bool sample = false;
  int32_t kv_hit_tokens = 0;
  int32_t admission = 0;
};

// The rows of a chunk under `s`; `sample` means the chunk ends at the last
// token and the next token is sampled from it.
void sharing_rows(const SeqSharing& s, int32_t begin, int32_t n, bool sample, std::vector<RowSpec>* out);

class SeqPlanner {
 public:
  // An exact scheme's planner; the segment-reuse schemes' derive from it.
  SeqPlanner() = default;
  virtual ~SeqPlanner() = default;
  SeqPlanner(const SeqPlanner&) = delete;
  SeqPlanner& operator=(const SeqPlanner&) = delete;

  // What the scheme decided at admission (SharingScheme::admit sets it).
  const SeqSharing& sharing() const { return sharing_; }
  void set_sharing(SeqSharing s) { sharing_ = std::move(s); }

  // How the request's blocks are keyed, from its own keys (tenant, salt) and
  // the KV block size: the adapter's lineage past lineage_from, a shared
  // lineage tag, and the LR pool's keys. The engine adds the reuse fields
  // (exact_tokens, approx_index_from) once it has copied segments.
  CacheKeyPolicy cache_policy(const ExtraKeys& own, int32_t block_size) const;

  // The rows of a chunk when it is not planned by plan_chunk: every token
  // once, plus ICaRus's decoder row where sampled; under an LR lineage each
  // adapter row also writes its LR row, and a token before the K/V prefix
  // hit keeps its cached base K/V (the LR prefill).
  void chunk_rows(const ChunkSpan& c, std::vector<RowSpec>* out) const;

  // Redo rows (SeqSharing::redo_layers, DroidSpeak's critical layers), put
  // before the chunk's own: at the first chunk of each admission that
  // starts at a K/V prefix hit, every cached position the agent has not
  // processed (processed_here false: another agent wrote it) once, with the
  // adapter's weights. Nothing otherwise, or with no redo layers or adapter.
  template <typename Processed>
  void redo_rows(const ChunkSpan& c, Processed&& processed_here, std::vector<RowSpec>* out) {
    if (!redo_due(c)) return;
    for (int32_t p = 0; p < c.begin; ++p) {
      if (!processed_here(p)) out->push_back(RowSpec{p, true, true, false, false, true});
    }
  }

  // Segment reuse: whether the request's prompt chunks look segments up and
  // are planned by plan_chunk. Off for the exact schemes, for a request that
  // needs every prompt row (prompt logprobs), and after a preemption that
  // dropped the copied segments (stop_reuse): its recompute is then a plain,
  // exact one.
  bool reuses_segments() const { return reuse_ && !reuse_stopped_; }
  void stop_reuse() { reuse_stopped_ = true; }

  // The reused positions of the chunk to recompute, with their layers, and
  // the hooks. Positions not reused always run every layer (the engine adds
  // them; hooks see them too); the last prompt position is never reused.
  virtual void plan_chunk(const ReuseChunk& chunk, std::vector<ReuseRow>* rows,
                          std::vector<ReuseHook>* hooks) {
    (void)chunk;
    (void)rows;
    (void)hooks;
  }

  // A layer >= 0 asks for one selection over the whole prompt however the
  // scheduler chunks it. Every chunk but the prompt's last then runs each
  // of its positions densely up to that layer (K/V written in the layers
  // below it; layer 0 itself when the layer is 0), with no planner call; at
  // the last chunk the planner plans once, a ReuseChunk from the first such
  // chunk's begin to the prompt's end, and the earlier positions it plans
  // resume at the layer from their hidden state entering it. The cached
  // entries at the layer are still there for its hook (layer 0 aside).
  // The result is the one-chunk plan's, bit for bit. The contract: the
  // planner's rows run densely from layer 0 through at least this layer,
  // where its hook decides. -1: plan each chunk on its own.
  virtual int32_t whole_prompt_layer(int32_t n_layers) const {
    (void)n_layers;
    return -1;
  }

  // Whether the server's on-request captures (--relay-capture on-request:
  // hidden state and influence scores, KV components) are taken for this
  // request: RelayCaching reads them back when its segments are reused.
  virtual bool captures_state() const { return false; }

 protected:
  // A segment-reuse planner's constructor says it reuses.
  explicit SeqPlanner(bool reuses) : reuse_(reuses) {}

 private:
  // Whether redo rows run at this chunk; marks the admission as done.
  bool redo_due(const ChunkSpan& c);

  SeqSharing sharing_;
  bool reuse_ = false;
  bool reuse_stopped_ = false;
  int32_t redo_admission_ = -1;  // the admission whose redo rows ran
};

}  // namespace agentkv
