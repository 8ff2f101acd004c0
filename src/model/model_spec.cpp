#include "model/model_spec.h"

#include <cmath>

namespace agentkv {

namespace {

// Reads `<arch>.<key>` as a positive int32, or `def` when absent and def >= 0.
Result<int32_t> read_dim(const GgufFile& f, const std::string& key, int32_t def = -1) {
  if (!f.find(key)) {
    if (def >= 0) return def;
    return make_error(ErrorCode::kNotFound, "missing metadata key '", key, "'");
  }
  auto v = f.get_uint(key);
  if (!v.is_ok()) return v.status();
  if (*v == 0 || *v > (1u << 30)) return make_error(ErrorCode::kOutOfRange, "metadata '", key, "' = ", *v, " is out of range");
  return static_cast<int32_t>(*v);
}

Result<float> read_float(const GgufFile& f, const std::string& key, float def) {
  if (!f.find(key)) return def;
  auto v = f.get_float(key);
  if (!v.is_ok()) return v.status();
  if (!std::isfinite(*v)) return make_error(ErrorCode::kOutOfRange, "metadata '", key, "' is not finite");
  return static_cast<float>(*v);
}

// Gemma 3's local layers, as llama.cpp reads them: a window of 0 (or none)
// makes every layer global; the pattern is a period or one flag per layer.
Status read_sliding_window(const GgufFile& f, const std::string& p, ModelSpec& s) {
  const std::string wkey = p + "attention.sliding_window";
  if (!f.find(wkey)) return Status::ok();
  AKV_ASSIGN_OR_RETURN(uint64_t w, f.get_uint(wkey));
  if (w == 0) return Status::ok();
  if (w > (1u << 30)) return make_error(ErrorCode::kOutOfRange, "metadata '", wkey, "' = ", w, " is out of range");
  s.sliding_window = static_cast<int32_t>(w);
  s.layer_local.assign(s.n_layers, 0);
  const std::string pkey = p + "attention.sliding_window_pattern";
  const GgufValue* pv = f.find(pkey);
  if (pv != nullptr && pv->type == GgufType::kArray) {
    if (pv->arr.size() != static_cast<size_t>(s.n_layers)) {
      return make_error(ErrorCode::kParse, "metadata '", pkey, "' has ", pv->arr.size(), " flags for ", s.n_layers,
                        " layers");
    }
    for (int l = 0; l < s.n_layers; ++l) s.layer_local[l] = pv->arr[l].u != 0 || pv->arr[l].i != 0;
  } else {
    uint64_t n = 6;
    if (pv != nullptr) {
      AKV_ASSIGN_OR_RETURN(n, f.get_uint(pkey));
    }
    for (int l = 0; l < s.n_layers; ++l) s.layer_local[l] = n == 0 || l % n < n - 1;
  }
  AKV_ASSIGN_OR_RETURN(s.rope_freq_base_local, read_float(f, p + "rope.freq_base_swa", 10000.0f));
  if (!(s.rope_freq_base_local > 0)) return make_error(ErrorCode::kOutOfRange, "rope.freq_base_swa must be > 0");
  return Status::ok();
}

}  // namespace

Result<ModelSpec> model_spec_from_gguf(const GgufFile& f) {
  ModelSpec s;
  AKV_ASSIGN_OR_RETURN(std::string arch_name, f.get_string("general.architecture"));
  auto arch = arch_lookup(arch_name);
  if (!arch) {
    return make_error(ErrorCode::kUnsupported, "unsupported architecture '", arch_name,
                      "' (supported: llama, mistral, qwen2, qwen3, gemma3)");
  }
  s.arch = *arch;
  s.rope_style = arch->rope_style;
  if (auto n = f.get_string("general.name"); n.is_ok()) s.name = *n;
  const std::string p = arch_name + ".";

  AKV_ASSIGN_OR_RETURN(s.n_layers, read_dim(f, p + "block_count"));
  AKV_ASSIGN_OR_RETURN(s.d_model, read_dim(f, p + "embedding_length"));
  AKV_ASSIGN_OR_RETURN(s.ffn_dim, read_dim(f, p + "feed_forward_length"));
  AKV_ASSIGN_OR_RETURN(s.n_heads, read_dim(f, p + "attention.head_count"));
  AKV_ASSIGN_OR_RETURN(s.n_kv_heads, read_dim(f, p + "attention.head_count_kv", s.n_heads));
  if (s.d_model % s.n_heads != 0 && !f.find(p + "attention.key_length")) {
    return make_error(ErrorCode::kParse, "embedding_length ", s.d_model, " is not a multiple of head_count ", s.n_heads);
  }
  AKV_ASSIGN_OR_RETURN(s.head_dim, read_dim(f, p + "attention.key_length", s.d_model / s.n_heads));
  AKV_ASSIGN_OR_RETURN(int32_t v_dim, read_dim(f, p + "attention.value_length", s.head_dim));
  if (v_dim != s.head_dim) {
    return make_error(ErrorCode::kUnsupported, "key_length ", s.head_dim, " != value_length ", v_dim);
  }
  if (s.n_heads % s.n_kv_heads != 0) {
    return make_error(ErrorCode::kParse, "head_count ", s.n_heads, " is not a multiple of head_count_kv ", s.n_kv_heads);
  }
  AKV_ASSIGN_OR_RETURN(s.n_ctx_train, read_dim(f, p + "context_length", 4096));
  AKV_ASSIGN_OR_RETURN(s.norm_eps, read_float(f, p + "attention.layer_norm_rms_epsilon", 1e-5f));
  if (!(s.norm_eps > 0)) return make_error(ErrorCode::kOutOfRange, "layer_norm_rms_epsilon must be > 0");
  AKV_ASSIGN_OR_RETURN(s.rope_dim, read_dim(f, p + "rope.dimension_count", s.head_dim));
  if (s.rope_dim > s.head_dim || s.rope_dim % 2 != 0) {
    return make_error(ErrorCode::kParse, "rope.dimension_count ", s.rope_dim, " must be even and <= head dim ", s.head_dim);
  }
  AKV_ASSIGN_OR_RETURN(s.rope_freq_base, read_float(f, p + "rope.freq_base", 10000.0f));
  if (!(s.rope_freq_base > 0)) return make_error(ErrorCode::kOutOfRange, "rope.freq_base must be > 0");

  // RoPE scaling as the file declares it. Llama 3 style scaling arrives as a
  // rope_freqs tensor; YaRN needs a ramp we do not implement yet.
  std::string scaling = "none";
  if (f.find(p + "rope.scaling.type")) {
    AKV_ASSIGN_OR_RETURN(scaling, f.get_string(p + "rope.scaling.type"));
  }
  AKV_ASSIGN_OR_RETURN(float factor, read_float(f, p + "rope.scaling.factor", 0.0f));
  if (f.find(p + "rope.scale_linear")) {  // older files
    scaling = "linear";
    AKV_ASSIGN_OR_RETURN(factor, read_float(f, p + "rope.scale_linear", 1.0f));
  }
  if (scaling == "linear") {
    if (!(factor > 0)) return make_error(ErrorCode::kParse, "rope scaling 'linear' needs a factor > 0");
    s.rope_scaling = RopeScalingType::kLinear;
    s.rope_freq_scale = 1.0f / factor;
  } else if (scaling != "none" && !(scaling.empty())) {
    return make_error(ErrorCode::kUnsupported, "unsupported rope scaling type '", scaling, "'");
  }

  const GgufTensorInfo* embd = f.find_tensor("token_embd.weight");
  if (!embd) return make_error(ErrorCode::kNotFound, "missing tensor 'token_embd.weight'");
  if (embd->ne.size() != 2 || embd->ne[1] > (1 << 24)) {
    return make_error(ErrorCode::kParse, "tensor 'token_embd.weight' must be 2-D with a sane vocabulary size");
  }
  s.n_vocab = static_cast<int32_t>(embd->ne[1]);
  s.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  s.has_rope_freqs = f.find_tensor("rope_freqs.weight") != nullptr;
  if (s.has_rope_freqs) s.rope_scaling = RopeScalingType::kLlama3;
  s.attn_scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  if (arch->embed_scale) s.embed_scale = std::sqrt(static_cast<float>(s.d_model));
  if (arch->arch == Arch::kGemma3 && s.n_layers == 62) {  // Gemma 3 27B (llama.cpp: LLM_TYPE_27B)
    s.attn_scale = 1.0f / std::sqrt(static_cast<float>(s.d_model / s.n_heads));
  }
  AKV_ASSIGN_OR_RETURN(s.final_logit_softcap, read_float(f, p + "final_logit_softcapping", 0.0f));
  if (s.final_logit_softcap < 0) return make_error(ErrorCode::kOutOfRange, "final_logit_softcapping must be >= 0");
  if (arch->sliding_window) {
    AKV_RETURN_IF_ERROR(read_sliding_window(f, p, s));
  }
  return s;
}

}  // namespace agentkv
