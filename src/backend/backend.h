// The kernels the runner calls. Kernels know nothing of schemes or of the KV
// store's bookkeeping: they see plain row-major float arrays, positions, and
// block tables in CSR form (FlashInfer's paged layout).
//
// Shape notation: [rows, cols] row-major; "rows" are token rows of a Step.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/kv_dtype.h"
#include "util/huge_pages.h"
#include "util/status.h"

namespace agentkv {

enum class RopeStyle {
  kNormal,  // rotate adjacent pairs (x[2i], x[2i+1])     — llama, mistral
  kNeox,    // rotate halves (x[i], x[i + rot_dim/2])     — qwen2, qwen3
};

struct RopeParams {
  RopeStyle style = RopeStyle::kNormal;
  int32_t rot_dim = 0;          // dimensions rotated per head (<= head_dim)
  float freq_base = 10000.0f;
  // Per-dimension-pair frequency divisors (rot_dim/2 entries), or null for
  // none. Llama 3 style scaling and "rope_freqs" tensors are expressed here;
  // linear scaling is freq_scale.
  const float* freq_factors = nullptr;
  float freq_scale = 1.0f;      // positions are multiplied by this
  float attn_factor = 1.0f;     // YaRN magnitude scaling of cos/sin
};

// One layer's paged K/V storage, elements of type dtype. Token t of block b
// for kv-head h starts at element
//   b * block_stride + t * kv_heads * head_dim + h * head_dim
// of k (same for v). block_stride lets several layers share one allocation.
// Kernels take f32 rows, round them to dtype when writing, and widen what
// they read back to f32.
struct KvLayerView {
  void* k = nullptr;
  void* v = nullptr;
  int64_t block_stride = 0;   // elements between consecutive blocks
  int32_t block_size = 0;     // tokens per block
  int32_t kv_heads = 0;
  int32_t head_dim = 0;
  KvDType dtype = KvDType::kF32;
};

// Flash-LoRA-Attention (LRAgent Alg. 1, App. B; docs/scheme_algorithms.md §1.2): a
// sequence s with b[s] set reads V = V_base + scale[s] · V_lr · B^T, where
// V_lr is the rank-r row X·A^T the LR cache keeps per token (one row per
// token, shared by every kv head, stored before scaling) and B (kv_dim,
// rank[s]) is the adapter's v_proj lora_B; kv head h uses rows [h·D,
// (h+1)·D) of B (GQA). The kernel never forms that V: a second accumulator
// of width r follows the same online softmax, and per query head
//   O = (P·V_base + scale · (P·V_lr) · B_h^T) / l.
// LR rows are paged like K/V, with their own block table (the LR cache has
// its own pool and lineage) over blocks of the same block_size.
struct LrAttention {
  const void* lr = nullptr;               // this layer: LR row of token t of LR block b at element b * block_stride + t * width
  int64_t block_stride = 0;               // elements between consecutive LR blocks
  int32_t width = 0;                      // elements per LR row, >= every rank[s]
  const int32_t* block_indptr = nullptr;  // [n_seqs + 1] LR block table, CSR
  const int32_t* block_ids = nullptr;
  const float* const* b = nullptr;        // [n_seqs] B (kv_dim, rank[s]) row-major; null: the sequence has no LR
  const int32_t* rank = nullptr;          // [n_seqs]
  const float* scale = nullptr;           // [n_seqs] lora_alpha / r
  // How: kFused keeps the rank-r accumulator (extra work per query head:
  // L·r, plus r·D for B); kExpand expands each sequence's V rows once per
  // call (L · r · kv_dim multiply-adds) and attends over them, as an engine
  // without Flash-LoRA-Attention does; kAuto picks per sequence: fused for
  // decode and chunks up to about 120 rows, expand beyond (the fused
  // accumulator rides in P·V's pass almost free, so expanding pays only for
  // long chunks; docs/benchmarks.md, "Flash-LoRA-Attention"). Equal to rounding;
  // under kAuto a row's rounding so depends on its sequence's rows in the
  // call (only LR sequences, whose schemes are approximate anyway).
  // kFused and kExpand keep batch invariance.
  enum class Path { kAuto, kFused, kExpand };
  Path path = Path::kAuto;
  KvDType dtype = KvDType::kF32;  // element type of the LR rows (the KV cache's, --kv-dtype)
};

// Host-side description of one Step's attention, built once per Step and used
// by every layer. Rows of sequence s are q rows [row_indptr[s], row_indptr[s+1]);
// its KV blocks are block_ids[block_indptr[s] .. block_indptr[s+1]); KV position
// j of the sequence lives in block j / block_size, slot j % block_size.
// A row at position p attends causally to KV positions 0..p (which must all be
// written before the call, including the row's own K/V), or with a sliding
// window W > 0 to positions max(0, p - W + 1)..p only (Gemma's local layers;
// llama.cpp's LLAMA_SWA_TYPE_STANDARD: key j is masked when p - j >= W).
struct AttentionPlan {
  int32_t n_seqs = 0;
  const int32_t* row_indptr = nullptr;    // [n_seqs + 1]
  const int32_t* row_pos = nullptr;       // [n_rows] position of each query row
  const int32_t* block_indptr = nullptr;  // [n_seqs + 1]
  const int32_t* block_ids = nullptr;     // [block_indptr[n_seqs]]
  // Optional, for RelayCaching's influence score: rows with colsum_slot[r]
  // = c >= 0 also get the attention mass each key receives from them,
  // summed over the query heads of each kv head: for kv head h and key
  // j <= row_pos[r], colsum[(c * kv_heads + h) * colsum_stride + j] +=
  // sum over those heads of softmax(q K^T * scale)[j]. The caller zeroes
  // colsum and sums over h. The attention output does not change. Each row
  // needs a slot of its own: rows in different work items add to their
  // lines from different threads.
  const int32_t* colsum_slot = nullptr;  // [n_rows] or nullptr
  float* colsum = nullptr;
  int64_t colsum_stride = 0;             // >= the longest row_pos + 1
  // Optional: sequences whose V has a low-rank part (LRAgent), or nullptr.
  const LrAttention* lr = nullptr;
  // Sliding window in positions (see above); 0: every key up to the row's own.
  int32_t window = 0;
};

// The first key position a query at `pos` sees under `window` (0: none).
inline int32_t attention_key_begin(int32_t pos, int32_t window) {
  return window > 0 && pos >= window ? pos - window + 1 : 0;
}

// A weight matrix kept in its file's block format: n rows of k elements, each
// row row_bytes long, in ggml type `type` (the on-disk id, e.g. 3 = q4_1).
// matmul_quant reads these directly, 4-8x fewer bytes than f32.
struct QuantMatrix {
  uint32_t type = 0;
  const uint8_t* data = nullptr;
  int64_t row_bytes = 0;
  int64_t n = 0;  // rows (out_features)
  int64_t k = 0;  // elements per row (in_features)
  // The backend's own copy of these weights, laid out once for its kernels
  // (backend_i::prepare_weights), or null: the kernels read `data` alone.
  const void* layout = nullptr;
  // data holds a q4_K, q6_K, q5_0 or q8_0 matrix in the CPU backend's decode layout
  // (backend_cpu_k8_records) instead of the file's blocks; row_bytes stays
  // the file's. Same products, bit for bit.
  bool k8 = false;
};

// backend_i::prepare_weights: the layout (null: none) and its bytes.
struct PreparedWeights {
  std::shared_ptr<const void> layout;
  int64_t bytes = 0;
};

// One adapter's LoRA pair for one target module (PEFT layout), as the lora op
// reads it: for a Linear y = x · W^T with W (n, k), the adapter adds
// scale · (x · A^T) · B^T.
struct LoraView {
  const float* a = nullptr;  // (rank, k) lora_A: projects the input down to rank
  const float* b = nullptr;  // (n, rank) lora_B: projects back up to the output
  int32_t rank = 0;
  float scale = 0.0f;        // lora_alpha / rank (or / sqrt(rank) with rsLoRA)
};

// How matmul_quant takes its activations: f32 (the exact product with the
// dequantized weights; logits within 1e-6 of a float64 reference) or rounded
// to 8 bits per 32-value block for integer dot products (faster on q4_0, q4_1
// and q8_0 weights, about 1e-3 on the logits; other types stay f32).
enum class ActQuant { kF32, kQ8 };

// "f32" or "q8"; nullopt for anything else.
inline std::optional<ActQuant> act_quant_parse(std::string_view name) {
  if (name == "f32") return ActQuant::kF32;
  if (name == "q8") return ActQuant::kQ8;
  return std::nullopt;
}

struct BackendConfig {
  int n_threads = 1;
  ActQuant act_quant = ActQuant::kF32;
  // prepare_weights lays quantized weights out once for the prefill kernels,
  // and for the decode kernels of q4_K, q6_K, q5_0 and q8_0 (more memory, less work per
  // call); off: it returns null.
  bool prepack_weights = false;
};

// Interface (llama.cpp's `_i` convention).
class backend_i {
 public:
  virtual ~backend_i() = default;
  virtual std::string name() const = 0;
  virtual int n_threads() const = 0;

  // y[m, n] = x[m, k] · w[n, k]^T (+ y if accumulate). w is a Linear weight in
  // PyTorch layout (out_features rows of in_features).
  virtual void matmul(const float* x, const float* w, float* y, int64_t m, int64_t k, int64_t n,
                      bool accumulate = false) = 0;

  // y[r] = x[r] / rms(x[r]) * w, rows of dim. x == y allowed.
  virtual void rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps) = 0;

  // In place on x[rows, n_heads, head_dim]: rotate each head of row r by row_pos[r].
  virtual void rope(float* x, const int32_t* row_pos, int64_t rows, int32_t n_heads, int32_t head_dim,
                    const RopeParams& p) = 0;

  // In place on x[rows, n_heads, head_dim], rows that rope already rotated:
  // rotates each head of row r on by delta[r] positions, so rope(x, p) then
  // rope_delta(x, d) is rope(x, p + d) up to rounding (RoPE is a rotation,
  // R(p + d) = R(d) R(p)). Same pairs, rot_dim, freq_base, freq_factors and
  // freq_scale as rope, angles in double; attn_factor is NOT applied: the
  // magnitude scale is already in x, and applying it again would square it.
  // delta may be negative, zero (the row is left bit for bit) or large.
  virtual void rope_delta(float* x, const int32_t* delta, int64_t rows, int32_t n_heads, int32_t head_dim,
                          const RopeParams& p) = 0;

  // out[i] = silu(gate[i]) * up[i] for i < n. out may alias gate.
  virtual void swiglu(const float* gate, const float* up, float* out, int64_t n) = 0;

  // out[i] = gelu_tanh(gate[i]) * up[i] for i < n (GeGLU: Gemma's FFN, HF's
  // gelu_pytorch_tanh), gelu_tanh(x) = x / 2 * (1 + tanh(sqrt(2/pi) * (x +
  // 0.044715 x^3))). out may alias gate.
  virtual void geglu(const float* gate, const float* up, float* out, int64_t n) = 0;

  // Whether matmul_quant handles this ggml type id.
  virtual bool supports_quant(uint32_t type) const = 0;
  // A copy of w laid out for this backend's kernels, made once (at load),
  // to pass as QuantMatrix::layout with w; empty when the backend keeps none
  // for w (BackendConfig::prepack_weights off, or no layout for its type).
  // The results do not change, bit for bit; the memory does. decode_only:
  // w's products have a row per sequence (the output matrix), so only a
  // decode layout is worth its memory (empty where the type has none).
  virtual PreparedWeights prepare_weights(const QuantMatrix& w, bool decode_only = false) {
    (void)w;
    (void)decode_only;
    return {};
  }

  // y[m, w.n] = x[m, w.k] · dequant(w)^T (+ y if accumulate), activations in
  // f32, for any m (decode and prefill). Kernels keep one summation order per
  // output whatever m and the thread count (batch invariance, docs/design.md §4).
  virtual void matmul_quant(const float* x, const QuantMatrix& w, float* y, int64_t m, bool accumulate = false) = 0;

  // Two products of one input, ya = x · dequant(a)^T and yb = x · dequant(b)^T
  // (k/v, gate/up): the same bits as two matmul_quant calls. A backend may
  // run them as one pass and round the activations once (ActQuant::kQ8).
  virtual void matmul_quant_pair(const float* x, const QuantMatrix& a, float* ya, const QuantMatrix& b, float* yb,
                                 int64_t m) {
    matmul_quant(x, a, ya, m);
    matmul_quant(x, b, yb, m);
  }

  // y[i] += x[i] for i < n (residual).
  virtual void add(const float* x, float* y, int64_t n) = 0;

  // Writes k_rows/v_rows [rows, kv_heads * head_dim] into the cache slots
  // slot[r] = block_id * block_size + offset. Rows with a negative slot are
  // skipped (rows whose K/V a scheme keeps from the cache).
  virtual void kv_write(const KvLayerView& kv, const float* k_rows, const float* v_rows, const int64_t* slots,
                        int64_t rows) = 0;

  // Moves cached entries of one layer to new positions (KvStore segment
  // moves, SparseX copy-and-align): for i < n, copies the K and V of slot
  // src_slots[i] to slot dst_slots[i] (slots as in kv_write, all valid) and
  // rotates the copied K (kv_heads heads of head_dim) by delta[i] as
  // rope_delta does, bit for bit; V is copied as is. No destination may be a
  // source: the copies run in parallel and in no set order.
  virtual void kv_copy_rotate(const KvLayerView& kv, const int64_t* src_slots, const int64_t* dst_slots,
                              const int32_t* delta, int64_t n, const RopeParams& p) = 0;

  // Grouped LoRA for the rows of one adapter (docs/design.md §2: rows grouped by
  // adapter): for i < n_rows, with r = rows[i],
  //   y[r, :] += w.scale * (x[r, :] · w.a^T) · w.b^T.
  // x: (R, k) and y: (R, n) are a whole Step's activations and outputs
  // (R > every rows[i]); rows: [n_rows] distinct row indices, in any order.
  // Accumulates: y already holds the base projection.
  virtual void lora(const float* x, int64_t k, const LoraView& w, const int32_t* rows, int64_t n_rows, float* y,
                    int64_t n) = 0;

  // The LR cache's rows (LRAgent): for i < n_rows, t[i, :rank] =
  // x[rows[i], :] · a^T, unscaled, with a (rank, k) a lora_A. t: (n_rows, rank).
  virtual void lora_down(const float* x, int64_t k, const float* a, int32_t rank, const int32_t* rows,
                         int64_t n_rows, float* t) = 0;

  // out[rows, n_heads, head_dim] = softmax(q K^T * scale, causal by position) V
  // over each row's sequence blocks. GQA: query head h reads kv head
  // h / (n_heads / kv_heads). With plan.lr, V of the sequences it names has
  // a low-rank part (Flash-LoRA-Attention, LrAttention above).
  virtual void attention(const AttentionPlan& plan, const float* q, int32_t n_heads, const KvLayerView& kv,
                         float scale, float* out) = 0;

  // Attention mass each key of ONE sequence receives from a subset of its
  // query rows (selection hooks: SparseX Sparse-Q scores, docs/scheme_algorithms.md §2.1):
  //   colsum[j] = sum_i sum_h softmax(q[i, h] K_{h/group}^T * scale over keys b_i..q_pos[i])[j]
  // for j < n_keys, over all n_heads query heads (GQA as in attention); a
  // query adds nothing to keys after its position. q: [n_q, n_heads,
  // head_dim] after RoPE, rows at any positions, each < n_keys; key j lives
  // at slot j % block_size of block blocks[j / block_size], n_keys <=
  // n_blocks * block_size. colsum [n_keys] is overwritten. q·k follows
  // dot_tile.h's order and the sums a fixed order (heads, then queries as
  // given), so the result does not depend on the thread count. b_i =
  // attention_key_begin(q_pos[i], window): a query adds nothing to keys
  // outside its sliding window either.
  virtual void attention_colsum(const float* q, const int32_t* q_pos, int64_t n_q, int32_t n_heads,
                                const int32_t* blocks, int32_t n_blocks, int32_t n_keys,
                                const KvLayerView& kv, float scale, float* colsum, int32_t window = 0) = 0;
};

std::unique_ptr<backend_i> backend_cpu_init(const BackendConfig& cfg);
// supports_quant of the CPU backend, before one exists: the model loader
// keeps no f32 copy of matrices of these types (LoadOptions::packed_only).
bool backend_cpu_reads_packed(uint32_t type);
// The instruction set of the CPU backend's q8 kernels: "auto" (the best this
// CPU runs but amx) or scalar, avx2, avxvnni, avx512, amx (avx512 with prefill
// rows in AMX-INT8 tiles; opt-in: same bits, no faster than avx512 where measured),
// amx-emulated (that kernel with the tiles emulated, for tests). At avx512 and both amx, attention's q·K and
// P·V run on 512-bit vectors too (cpu/attention_wide.h). Every one gives the same bits. An error names the
// ones available. Call before any backend works: it applies to the whole process.
Status backend_cpu_select_isa(std::string_view name);
// The one in use, by name.
const char* backend_cpu_isa();
// The CPU backend's decode layout of q4_K, q6_K, q5_0 and q8_0 matrices
// (QuantMatrix::k8; cpu/k8_layout.h): records of eight rows whose q8 decode
// products need no horizontal reduction. True for the types that have it.
bool backend_cpu_k8_type(uint32_t type);
// The weights per column of one record (256 for q4_K and q6_K, 32 for q5_0
// and q8_0; a matrix's k must be a multiple), or 0 for a type without the layout.
int64_t backend_cpu_k8_unit(uint32_t type);
// w's records (w in the file's blocks, backend_cpu_k8_type(w.type), w.k a
// multiple of backend_cpu_k8_unit): (n + 7) / 8 * k / unit records of 1184
// (q4_K), 1680 (q6_K), 176 (q5_0) or 272 (q8_0) bytes, in place of the
// file's n * k / unit blocks of 144, 210, 22 or 34.
WeightBytes backend_cpu_k8_records(const QuantMatrix& w);
// Row r (0 <= r < w.n) of w held in records (w.k8) as the file's blocks:
// w.row_bytes bytes into out, byte for byte the file's (a tied embedding's
// row for the token lookup).
void backend_cpu_k8_file_row(const QuantMatrix& w, int64_t r, uint8_t* out);

}  // namespace agentkv
