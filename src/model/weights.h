// Model weights. Matrices of a type the backend reads packed are kept only as
// the file's blocks; everything else (vectors, f32/f16 files, types without
// a packed kernel) is dequantized to the compute dtype at load. Shapes are
// row-major, outermost first; a Linear weight is (out_features, in_features).
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_spec.h"
#include "util/huge_pages.h"

namespace agentkv {

// The dtype weights are dequantized to at load. Only f32 is implemented; the
// parameter exists so bf16/f16 compute can be added without touching callers.
enum class DType { kF32 };

struct DenseTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<float> data;  // dequantized values; empty when the matrix is packed-only
  // The file's quantized bytes of a matrix, which the matmul kernels read
  // directly; empty for f32 files and vectors. On huge pages (util/huge_pages.h).
  WeightBytes packed;
  uint32_t packed_type = 0;       // ggml type id of `packed`
  int64_t packed_row_bytes = 0;   // the file's, also when k8
  // `packed` holds the CPU backend's decode layout of a q4_K, q6_K, q5_0 or
  // q8_0 matrix (QuantMatrix::k8; runtime/decode_layout.h) instead of the
  // file's blocks: the engine's one copy of that matrix. row_f32 and
  // values_f32 then return false / empty (only the backend reads the
  // layout; Runner::embed asks it for a tied table's rows).
  bool k8 = false;

  bool empty() const { return data.empty() && packed.empty(); }
  const float* f32() const { return data.data(); }  // null when packed-only
  int64_t numel() const;
  // Row r of a matrix (shape[1] values) as f32, from the f32 copy or decoded
  // from the packed blocks: the same values either way (format's dequantizer).
  // False when r is out of range or the type cannot be decoded.
  bool row_f32(int64_t r, float* out) const;
  // Every value as f32 (tools: synthetic adapters, checks). A copy.
  std::vector<float> values_f32() const;
};

struct LayerWeights {
  DenseTensor attn_norm;  // (d_model)
  DenseTensor wq;         // (n_heads * head_dim, d_model)
  DenseTensor wk;         // (n_kv_heads * head_dim, d_model)
  DenseTensor wv;         // (n_kv_heads * head_dim, d_model)
  DenseTensor bq;         // (n_heads * head_dim)     qwen2 only, else empty
  DenseTensor bk;         // (n_kv_heads * head_dim)  qwen2 only
  DenseTensor bv;         // (n_kv_heads * head_dim)  qwen2 only
  DenseTensor q_norm;     // (head_dim)               qwen3, gemma3
  DenseTensor k_norm;     // (head_dim)               qwen3, gemma3
  DenseTensor post_attn_norm;  // (d_model)           gemma3: on the attention output
  DenseTensor post_ffn_norm;   // (d_model)           gemma3: on the FFN output
  DenseTensor wo;         // (d_model, n_heads * head_dim)
  DenseTensor ffn_norm;   // (d_model)
  DenseTensor w_gate;     // (ffn_dim, d_model)
  DenseTensor w_up;       // (ffn_dim, d_model)
  DenseTensor w_down;     // (d_model, ffn_dim)
};

struct Weights {
  DenseTensor tok_embd;     // (n_vocab, d_model)
  DenseTensor output_norm;  // (d_model)
  DenseTensor output;       // (n_vocab, d_model); empty when tied to tok_embd
  DenseTensor rope_freqs;   // (rope_dim / 2) frequency divisors, Llama 3 scaling; may be empty
  std::vector<LayerWeights> layers;
};

struct Model {
  ModelSpec spec;
  Weights w;

  const DenseTensor& output_weight() const { return w.output.empty() ? w.tok_embd : w.output; }
};

}  // namespace agentkv
