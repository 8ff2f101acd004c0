#include "model/synth_model.h"

#include "format/quantize.h"

#include <cmath>
#include <random>

namespace agentkv {

Result<SynthModelConfig> synth_model_preset(const std::string& name) {
  SynthModelConfig c;
  if (name == "tiny") return c;
  if (name == "smollm2-135m") {
    c.n_layers = 30, c.d_model = 576, c.n_heads = 9, c.n_kv_heads = 3, c.ffn_dim = 1536, c.rope_freq_base = 100000.0f;
    return c;
  }
  if (name == "llama-1b") {
    c.n_layers = 16, c.d_model = 2048, c.n_heads = 32, c.n_kv_heads = 8, c.ffn_dim = 8192, c.rope_freq_base = 500000.0f;
    return c;
  }
  if (name == "llama-8b") {
    c.n_layers = 32, c.d_model = 4096, c.n_heads = 32, c.n_kv_heads = 8, c.ffn_dim = 14336;
    c.rope_freq_base = 500000.0f, c.tied_embeddings = false;
    return c;
  }
  return make_error(ErrorCode::kInvalidArgument, "unknown preset '", name, "' (tiny, smollm2-135m, llama-1b, llama-8b)");
}

GgmlType synth_matrix_type(GgmlType requested, int64_t k) {
  GgmlType fallback;  // llama-quantize's (llama_tensor_get_type)
  switch (requested) {
    case GgmlType::kQ4_K:
      fallback = GgmlType::kQ5_0;
      break;
    case GgmlType::kQ5_K:
      fallback = GgmlType::kQ5_1;
      break;
    case GgmlType::kQ6_K:
      fallback = GgmlType::kQ8_0;
      break;
    default:
      return requested;
  }
  if (k % 256 == 0) return requested;
  if (k % 32 != 0) return GgmlType::kF16;
  return fallback;
}

Status synth_model_write(const SynthModelConfig& c, const GgufFile& vocab_from, const std::string& out_path,
                         std::map<GgmlType, int>* matrix_types) {
  if (c.n_layers <= 0 || c.d_model <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.ffn_dim <= 0) {
    return make_error(ErrorCode::kInvalidArgument, "model dimensions must be positive");
  }
  if (c.n_heads % c.n_kv_heads) return make_error(ErrorCode::kInvalidArgument, "heads must be a multiple of kv heads");
  const int32_t hd = c.head_dim > 0 ? c.head_dim : c.d_model / c.n_heads;
  if (hd <= 0 || hd % 2) return make_error(ErrorCode::kInvalidArgument, "head dim must be even and positive");
  AKV_ASSIGN_OR_RETURN(auto tokens, vocab_from.get_string_array("tokenizer.ggml.tokens"));
  const int32_t n_vocab = c.n_vocab > 0 ? c.n_vocab : static_cast<int32_t>(tokens.size());
  if (n_vocab > static_cast<int32_t>(tokens.size())) {
    return make_error(ErrorCode::kInvalidArgument, "n_vocab ", n_vocab, " exceeds the vocabulary file's ", tokens.size());
  }

  GgufWriter w;
  const std::string& a = c.arch;
  w.add_string("general.architecture", a);
  w.add_string("general.name", "agentkv synth " + a);
  w.add_uint32(a + ".block_count", c.n_layers);
  w.add_uint32(a + ".context_length", 8192);
  w.add_uint32(a + ".embedding_length", c.d_model);
  w.add_uint32(a + ".feed_forward_length", c.ffn_dim);
  w.add_uint32(a + ".attention.head_count", c.n_heads);
  w.add_uint32(a + ".attention.head_count_kv", c.n_kv_heads);
  w.add_uint32(a + ".attention.key_length", hd);
  w.add_uint32(a + ".attention.value_length", hd);
  w.add_uint32(a + ".rope.dimension_count", hd);
  w.add_float32(a + ".rope.freq_base", c.rope_freq_base);
  w.add_float32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
  const bool gemma = a == "gemma3";
  if (gemma && c.sliding_window > 0) {
    w.add_uint32(a + ".attention.sliding_window", c.sliding_window);
    if (c.swa_pattern > 0) w.add_uint32(a + ".attention.sliding_window_pattern", c.swa_pattern);
    if (c.rope_freq_base_local > 0) w.add_float32(a + ".rope.freq_base_swa", c.rope_freq_base_local);
  }
  for (const auto& [k, v] : vocab_from.kvs()) {
    if (k.rfind("tokenizer.", 0) == 0) w.add_kv(k, v);
  }

  std::mt19937_64 rng(c.seed);
  std::normal_distribution<float> normal(0.0f, c.init_std);
  Status err;
  if (matrix_types) matrix_types->clear();
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, GgmlType requested) {
    if (!err.is_ok()) return;
    // Blocks run along a row (cols values): the type's block must divide it.
    const GgmlType type = synth_matrix_type(requested, cols);
    const auto traits = ggml_type_traits(static_cast<uint32_t>(type));
    const int64_t block = traits ? traits->block_elems : 1;  // an unknown type is quantize_values' error
    if (cols % block != 0) {
      err = make_error(ErrorCode::kInvalidArgument, name, ": rows of ", cols, " values cannot be written as ",
                       ggml_type_name(static_cast<uint32_t>(type)), " (needs a multiple of ", block, ")");
      return;
    }
    if (matrix_types) ++(*matrix_types)[type];
    std::vector<float> v(rows * cols);
    for (auto& x : v) x = normal(rng);
    auto enc = quantize_values(type, v.data(), static_cast<int64_t>(v.size()));
    if (!enc.is_ok()) {
      err = enc.status().with_context(name);
      return;
    }
    w.add_tensor(name, type, {cols, rows}, std::move(enc).value());
  };
  auto ones = [&](const std::string& name, int64_t n) {
    std::vector<float> v(n, 1.0f);
    if (gemma) {
      for (auto& x : v) x += normal(rng);
    }
    w.add_tensor_f32(name, {n}, std::move(v));
  };
  matrix("token_embd.weight", n_vocab, c.d_model, c.type);
  ones("output_norm.weight", c.d_model);
  if (!c.tied_embeddings) matrix("output.weight", n_vocab, c.d_model, c.type);
  const int64_t qd = int64_t{c.n_heads} * hd, kvd = int64_t{c.n_kv_heads} * hd;
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    ones(p + "attn_norm.weight", c.d_model);
    matrix(p + "attn_q.weight", qd, c.d_model, c.type);
    matrix(p + "attn_k.weight", kvd, c.d_model, c.type);
    matrix(p + "attn_v.weight", kvd, c.d_model, c.type);
    matrix(p + "attn_output.weight", c.d_model, qd, c.type);
    if (a == "qwen2") {
      for (auto [n, d] : {std::pair{"attn_q.bias", qd}, {"attn_k.bias", kvd}, {"attn_v.bias", kvd}}) {
        std::vector<float> b(d);
        for (auto& x : b) x = normal(rng);
        w.add_tensor_f32(p + n, {d}, b);
      }
    }
    if (a == "qwen3" || gemma) {
      ones(p + "attn_q_norm.weight", hd);
      ones(p + "attn_k_norm.weight", hd);
    }
    if (gemma) {
      ones(p + "post_attention_norm.weight", c.d_model);
      ones(p + "post_ffw_norm.weight", c.d_model);
    }
    ones(p + "ffn_norm.weight", c.d_model);
    matrix(p + "ffn_gate.weight", c.ffn_dim, c.d_model, c.type);
    matrix(p + "ffn_up.weight", c.ffn_dim, c.d_model, c.type);
    matrix(p + "ffn_down.weight", c.d_model, c.ffn_dim, c.type);
  }
  AKV_RETURN_IF_ERROR(err);
  return w.write(out_path);
}

}  // namespace agentkv
