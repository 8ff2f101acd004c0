#include "model/loader.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <sstream>

#include "util/thread_pool.h"

namespace agentkv {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

class TensorLoader {
 public:
  TensorLoader(const GgufFile& f, ThreadPool& pool, const LoadOptions& opts) : f_(f), pool_(pool), opts_(opts) {}

  // `shape` is row-major (outermost first), the reverse of ggml's ne order.
  Result<DenseTensor> create(const std::string& name, std::vector<int64_t> shape, bool required = true) {
    const GgufTensorInfo* t = f_.find_tensor(name);
    if (!t) {
      if (!required) return DenseTensor{};
      return make_error(ErrorCode::kNotFound, "missing tensor '", name, "'");
    }
    std::vector<int64_t> ne(shape.rbegin(), shape.rend());
    if (t->ne != ne) {
      std::vector<int64_t> got(t->ne.rbegin(), t->ne.rend());
      return make_error(ErrorCode::kParse, "tensor '", name, "' has shape ", shape_str(got), ", expected ",
                        shape_str(shape));
    }
    auto traits = ggml_type_traits(static_cast<uint32_t>(t->type));
    if (!traits || !traits->can_dequantize) {
      return make_error(ErrorCode::kUnsupported, "unsupported tensor type ",
                        ggml_type_name(static_cast<uint32_t>(t->type)), " in tensor '", name, "'");
    }
    DenseTensor out;
    out.shape = std::move(shape);
    const int64_t row = t->ne[0];
    const int64_t rows = static_cast<int64_t>(t->n_elements) / row;
    auto bytes = f_.tensor_data(*t);
    AKV_ASSIGN_OR_RETURN(uint64_t row_bytes, ggml_row_bytes(t->type, row));
    if (row_bytes * static_cast<uint64_t>(rows) > bytes.size()) {
      return make_error(ErrorCode::kInternal, "tensor '", name, "': data span shorter than its shape");
    }
    const uint32_t type = static_cast<uint32_t>(t->type);
    if (opts_.keep_packed && t->ne.size() == 2 && t->type != GgmlType::kF32) {
      out.packed.assign(bytes.begin(), bytes.begin() + row_bytes * rows);
      out.packed_type = type;
      out.packed_row_bytes = static_cast<int64_t>(row_bytes);
      if (opts_.packed_only != nullptr && opts_.packed_only(type)) return out;
    }
    out.data.resize(t->n_elements);
    std::mutex mu;
    Status first_error;
    pool_.parallel_for(rows, [&](int64_t b, int64_t e, int) {
      for (int64_t r = b; r < e; ++r) {
        Status st = dequantize_row(t->type, bytes.data() + r * row_bytes, out.data.data() + r * row, row);
        if (!st.is_ok()) {
          std::lock_guard<std::mutex> lk(mu);
          if (first_error.is_ok()) first_error = st;
          return;
        }
      }
    });
    if (!first_error.is_ok()) return first_error.with_context("tensor '" + name + "'");
    return out;
  }

 private:
  const GgufFile& f_;
  ThreadPool& pool_;
  const LoadOptions& opts_;
};

}  // namespace

Result<std::shared_ptr<Model>> model_load(const GgufFile& file, const LoadOptions& opts) {
  if (opts.dtype != DType::kF32) return make_error(ErrorCode::kUnsupported, "only the f32 compute dtype is implemented");
  auto model = std::make_shared<Model>();
  AKV_ASSIGN_OR_RETURN(model->spec, model_spec_from_gguf(file));
  const ModelSpec& s = model->spec;
  ThreadPool pool(opts.n_threads);
  TensorLoader L(file, pool, opts);
  Weights& w = model->w;

  AKV_ASSIGN_OR_RETURN(w.tok_embd, L.create(tn::kTokenEmbd, {s.n_vocab, s.d_model}));
  AKV_ASSIGN_OR_RETURN(w.output_norm, L.create(tn::kOutputNorm, {s.d_model}));
  AKV_ASSIGN_OR_RETURN(w.output, L.create(tn::kOutput, {s.n_vocab, s.d_model}, /*required=*/false));
  AKV_ASSIGN_OR_RETURN(w.rope_freqs, L.create(tn::kRopeFreqs, {s.rope_dim / 2}, /*required=*/false));

  w.layers.resize(s.n_layers);
  for (int i = 0; i < s.n_layers; ++i) {
    LayerWeights& l = w.layers[i];
    auto B = [&](const char* suffix) { return tn::blk(i, suffix); };
    AKV_ASSIGN_OR_RETURN(l.attn_norm, L.create(B("attn_norm.weight"), {s.d_model}));
    AKV_ASSIGN_OR_RETURN(l.wq, L.create(B("attn_q.weight"), {s.q_dim(), s.d_model}));
    AKV_ASSIGN_OR_RETURN(l.wk, L.create(B("attn_k.weight"), {s.kv_dim(), s.d_model}));
    AKV_ASSIGN_OR_RETURN(l.wv, L.create(B("attn_v.weight"), {s.kv_dim(), s.d_model}));
    AKV_ASSIGN_OR_RETURN(l.wo, L.create(B("attn_output.weight"), {s.d_model, s.q_dim()}));
    if (s.arch.qkv_bias) {
      AKV_ASSIGN_OR_RETURN(l.bq, L.create(B("attn_q.bias"), {s.q_dim()}));
      AKV_ASSIGN_OR_RETURN(l.bk, L.create(B("attn_k.bias"), {s.kv_dim()}));
      AKV_ASSIGN_OR_RETURN(l.bv, L.create(B("attn_v.bias"), {s.kv_dim()}));
    }
    if (s.arch.qk_norm) {
      AKV_ASSIGN_OR_RETURN(l.q_norm, L.create(B("attn_q_norm.weight"), {s.head_dim}));
      AKV_ASSIGN_OR_RETURN(l.k_norm, L.create(B("attn_k_norm.weight"), {s.head_dim}));
    }
    if (s.arch.post_norms) {
      AKV_ASSIGN_OR_RETURN(l.post_attn_norm, L.create(B("post_attention_norm.weight"), {s.d_model}));
      AKV_ASSIGN_OR_RETURN(l.post_ffn_norm, L.create(B("post_ffw_norm.weight"), {s.d_model}));
    }
    AKV_ASSIGN_OR_RETURN(l.ffn_norm, L.create(B("ffn_norm.weight"), {s.d_model}));
    AKV_ASSIGN_OR_RETURN(l.w_gate, L.create(B("ffn_gate.weight"), {s.ffn_dim, s.d_model}));
    AKV_ASSIGN_OR_RETURN(l.w_up, L.create(B("ffn_up.weight"), {s.ffn_dim, s.d_model}));
    AKV_ASSIGN_OR_RETURN(l.w_down, L.create(B("ffn_down.weight"), {s.d_model, s.ffn_dim}));
  }
  return model;
}

Result<std::shared_ptr<Model>> model_load_file(const std::string& path, const LoadOptions& opts) {
  auto f = GgufFile::open(path);
  if (!f.is_ok()) return f.status();
  auto m = model_load(*f, opts);
  if (!m.is_ok()) return m.status().with_context(path);
  return m;
}

}  // namespace agentkv
