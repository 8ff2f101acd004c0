#include "model/loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "model/synth_model.h"
#include "test_models.h"

namespace agentkv {
namespace {

using testing::tiny_vocab_writer;
using testing::write_synth_model;

// A header with the hyper-parameters model_spec_from_gguf needs and a zero
// embedding of the tiny vocabulary (300 rows).
GgufWriter spec_writer(const std::string& arch, uint32_t layers, uint32_t d, uint32_t ffn, uint32_t heads,
                       uint32_t kv_heads) {
  GgufWriter w = tiny_vocab_writer();
  w.add_string("general.architecture", arch);
  w.add_uint32(arch + ".block_count", layers);
  w.add_uint32(arch + ".embedding_length", d);
  w.add_uint32(arch + ".feed_forward_length", ffn);
  w.add_uint32(arch + ".attention.head_count", heads);
  w.add_uint32(arch + ".attention.head_count_kv", kv_heads);
  w.add_tensor_f32("token_embd.weight", {d, 300}, std::vector<float>(size_t(d) * 300));
  return w;
}

TEST(ModelSpec, ReadsHyperParametersOfEachArch) {
  for (std::string arch : {"llama", "mistral", "qwen2", "qwen3", "gemma3"}) {
    SynthModelConfig c;
    c.arch = arch;
    c.n_layers = 3, c.d_model = 48, c.n_heads = 6, c.n_kv_heads = 2, c.ffn_dim = 80;
    std::string path = write_synth_model(c);
    ASSERT_FALSE(path.empty());
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.is_ok()) << f.status().message();
    auto s = model_spec_from_gguf(*f);
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    EXPECT_EQ(s->n_layers, 3);
    EXPECT_EQ(s->d_model, 48);
    EXPECT_EQ(s->n_heads, 6);
    EXPECT_EQ(s->n_kv_heads, 2);
    EXPECT_EQ(s->head_dim, 8);
    EXPECT_EQ(s->ffn_dim, 80);
    EXPECT_EQ(s->n_vocab, 300);
    EXPECT_TRUE(s->tied_embeddings);
    EXPECT_EQ(s->rope_style, arch.rfind("qwen", 0) == 0 || arch == "gemma3" ? RopeStyle::kNeox : RopeStyle::kNormal);
    auto m = model_load(*f, LoadOptions{});
    ASSERT_TRUE(m.is_ok()) << arch << ": " << m.status().message();
    EXPECT_EQ((*m)->w.layers.size(), 3u);
    EXPECT_EQ((*m)->w.layers[0].bq.empty(), arch != "qwen2");
    EXPECT_EQ((*m)->w.layers[0].q_norm.empty(), arch != "qwen3" && arch != "gemma3");
    EXPECT_EQ((*m)->w.layers[0].post_ffn_norm.empty(), arch != "gemma3");
    std::remove(path.c_str());
  }
}

TEST(ModelLoader, QuantizedMatricesDequantizeCloseToF32) {
  SynthModelConfig c;
  c.d_model = 64, c.n_heads = 4, c.n_kv_heads = 2, c.ffn_dim = 128, c.seed = 5;
  std::string p32 = write_synth_model(c);
  c.type = GgmlType::kQ8_0;
  std::string p8 = write_synth_model(c);
  c.type = GgmlType::kF16;
  std::string p16 = write_synth_model(c);
  auto m32 = model_load_file(p32, {});
  auto m8 = model_load_file(p8, {});
  auto m16 = model_load_file(p16, {});
  ASSERT_TRUE(m32.is_ok() && m8.is_ok() && m16.is_ok());
  const auto& a = (*m32)->w.layers[1].w_down.data;
  const auto& b = (*m8)->w.layers[1].w_down.data;
  const auto& h = (*m16)->w.layers[1].w_down.data;
  ASSERT_EQ(a.size(), b.size());
  double max_err8 = 0, max_err16 = 0, max_abs = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_err8 = std::max(max_err8, double(std::fabs(a[i] - b[i])));
    max_err16 = std::max(max_err16, double(std::fabs(a[i] - h[i])));
    max_abs = std::max(max_abs, double(std::fabs(a[i])));
  }
  EXPECT_GT(max_err8, 0);                 // it really was quantized
  EXPECT_LT(max_err8, max_abs / 127.0);   // within half a q8_0 step of the block max, and then some
  EXPECT_LT(max_err16, max_abs * 1e-3);
  for (auto* p : {&p32, &p8, &p16}) std::remove(p->c_str());
}

// packed_only: the matrices of the named types keep their file blocks and no
// f32 copy; row_f32 and values_f32 decode exactly what the copy would hold.
// Vectors and types left out keep the f32 copy.
TEST(ModelLoader, PackedOnlyMatricesKeepOneCopyWithTheSameValues) {
  SynthModelConfig c;
  c.d_model = 64, c.n_heads = 4, c.n_kv_heads = 2, c.ffn_dim = 128, c.seed = 9;
  c.type = GgmlType::kQ8_0;
  const std::string path = write_synth_model(c);
  auto full = model_load_file(path, {});
  auto one = model_load_file(path, {.packed_only = [](uint32_t t) { return t == uint32_t(GgmlType::kQ8_0); }});
  auto none = model_load_file(path, {.packed_only = [](uint32_t) { return false; }});
  ASSERT_TRUE(full.is_ok() && one.is_ok() && none.is_ok());
  const Weights& f = (*full)->w;
  const Weights& o = (*one)->w;
  const DenseTensor* pairs[][2] = {{&f.layers[1].w_down, &o.layers[1].w_down}, {&f.tok_embd, &o.tok_embd},
                                   {&f.layers[0].wk, &o.layers[0].wk}};
  for (const auto& [a, b] : pairs) {
    ASSERT_FALSE(a->data.empty());
    EXPECT_TRUE(b->data.empty());
    EXPECT_FALSE(b->empty());
    EXPECT_EQ(b->numel(), a->numel());
    EXPECT_EQ(b->packed, a->packed);
    EXPECT_EQ(b->values_f32(), a->data);
    std::vector<float> row(size_t(a->shape[1]));
    ASSERT_TRUE(b->row_f32(a->shape[0] - 1, row.data()));
    EXPECT_TRUE(std::equal(row.begin(), row.end(), a->data.end() - a->shape[1]));
    EXPECT_FALSE(b->row_f32(a->shape[0], row.data()));  // out of range
  }
  EXPECT_FALSE(o.layers[0].attn_norm.data.empty());  // vectors stay f32
  EXPECT_FALSE((*none)->w.layers[1].w_down.data.empty());
  std::remove(path.c_str());
}

// Writes a model whose tensor list is edited by `edit` before writing.
std::string write_edited(const std::function<void(GgufWriter&)>& add_tensors) {
  GgufWriter w = tiny_vocab_writer();
  w.add_string("general.architecture", "llama");
  w.add_uint32("llama.block_count", 1);
  w.add_uint32("llama.embedding_length", 8);
  w.add_uint32("llama.feed_forward_length", 16);
  w.add_uint32("llama.attention.head_count", 2);
  w.add_uint32("llama.attention.head_count_kv", 1);
  add_tensors(w);
  std::string path = "/tmp/agentkv_loader_edit_" + std::to_string(getpid()) + ".gguf";
  EXPECT_TRUE(w.write(path).is_ok());
  return path;
}

void add_all_but(GgufWriter& w, const std::string& skip, const std::string& misshape = "") {
  auto t = [&](const std::string& name, std::vector<int64_t> ne) {
    if (name == skip) return;
    if (name == misshape) ne[0] += 1;
    int64_t n = 1;
    for (auto d : ne) n *= d;
    w.add_tensor_f32(name, ne, std::vector<float>(n, 0.5f));
  };
  t("token_embd.weight", {8, 300});
  t("output_norm.weight", {8});
  t("blk.0.attn_norm.weight", {8});
  t("blk.0.attn_q.weight", {8, 8});
  t("blk.0.attn_k.weight", {8, 4});
  t("blk.0.attn_v.weight", {8, 4});
  t("blk.0.attn_output.weight", {8, 8});
  t("blk.0.ffn_norm.weight", {8});
  t("blk.0.ffn_gate.weight", {8, 16});
  t("blk.0.ffn_up.weight", {8, 16});
  t("blk.0.ffn_down.weight", {16, 8});
}

TEST(ModelLoader, CompleteHandWrittenModelLoads) {
  std::string path = write_edited([](GgufWriter& w) { add_all_but(w, ""); });
  auto m = model_load_file(path, {});
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  std::remove(path.c_str());
}

TEST(ModelLoader, MissingTensorIsNamed) {
  std::string path = write_edited([](GgufWriter& w) { add_all_but(w, "blk.0.attn_v.weight"); });
  auto m = model_load_file(path, {});
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("missing tensor 'blk.0.attn_v.weight'"), std::string::npos)
      << m.status().message();
  std::remove(path.c_str());
}

TEST(ModelLoader, MisshapenTensorIsNamedWithBothShapes) {
  std::string path = write_edited([](GgufWriter& w) { add_all_but(w, "", "blk.0.ffn_up.weight"); });
  auto m = model_load_file(path, {});
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("tensor 'blk.0.ffn_up.weight' has shape [16, 9], expected [16, 8]"),
            std::string::npos)
      << m.status().message();
  std::remove(path.c_str());
}

TEST(ModelLoader, UnsupportedTypeIsNamed) {
  std::string path = write_edited([](GgufWriter& w) {
    add_all_but(w, "blk.0.attn_q.weight");
    // i32: a real ggml type that is no weight format, so it cannot be dequantized.
    w.add_tensor("blk.0.attn_q.weight", GgmlType::kI32, {8, 8}, std::vector<uint8_t>(4 * 64, 0));
  });
  auto m = model_load_file(path, {});
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("unsupported tensor type i32 in tensor 'blk.0.attn_q.weight'"),
            std::string::npos)
      << m.status().message();
  std::remove(path.c_str());
}

// Gemma 3's keys as llama.cpp reads them: the window, a period for the
// pattern (default 6) or one flag per layer, the local RoPE base (default
// 10000), sqrt(d_model) on the embeddings, and the post-norm tensors.
TEST(ModelSpec, Gemma3SlidingWindowLayers) {
  auto spec_of = [](const std::function<void(GgufWriter&)>& extra) {
    GgufWriter w = spec_writer("gemma3", 7, 16, 32, 2, 1);
    extra(w);
    auto bytes = w.to_bytes();
    auto f = GgufFile::parse(bytes);
    EXPECT_TRUE(f.is_ok());
    return model_spec_from_gguf(*f);
  };
  auto none = spec_of([](GgufWriter&) {});
  ASSERT_TRUE(none.is_ok()) << none.status().message();
  EXPECT_EQ(none->sliding_window, 0);
  EXPECT_FALSE(none->is_local(0));
  EXPECT_FLOAT_EQ(none->embed_scale, 4.0f);
  EXPECT_EQ(none->arch.ffn_act, FfnAct::kGeluTanh);

  auto period = spec_of([](GgufWriter& w) { w.add_uint32("gemma3.attention.sliding_window", 512); });
  ASSERT_TRUE(period.is_ok());
  for (int l = 0; l < 7; ++l) EXPECT_EQ(period->is_local(l), l % 6 < 5) << l;
  EXPECT_EQ(period->layer_window(0), 512);
  EXPECT_EQ(period->layer_window(5), 0);
  EXPECT_FLOAT_EQ(period->rope_freq_base_local, 10000.0f);

  auto flags = spec_of([](GgufWriter& w) {
    w.add_uint32("gemma3.attention.sliding_window", 64);
    std::vector<GgufValue> v;
    for (bool b : {true, false, true, true, false, false, true}) v.push_back(GgufValue::of_bool(b));
    w.add_kv("gemma3.attention.sliding_window_pattern", GgufValue::of_array(GgufType::kBool, v));
    w.add_float32("gemma3.rope.freq_base_swa", 500.0f);
  });
  ASSERT_TRUE(flags.is_ok()) << flags.status().message();
  EXPECT_EQ(flags->layer_local, (std::vector<uint8_t>{1, 0, 1, 1, 0, 0, 1}));
  EXPECT_FLOAT_EQ(flags->rope_freq_base_local, 500.0f);

  auto short_flags = spec_of([](GgufWriter& w) {
    w.add_uint32("gemma3.attention.sliding_window", 64);
    w.add_kv("gemma3.attention.sliding_window_pattern",
             GgufValue::of_array(GgufType::kBool, {GgufValue::of_bool(true)}));
  });
  ASSERT_FALSE(short_flags.is_ok());
  EXPECT_NE(short_flags.status().message().find("1 flags for 7 layers"), std::string::npos)
      << short_flags.status().message();
}

TEST(ModelSpec, UnknownArchitectureIsAClearError) {
  GgufWriter w = tiny_vocab_writer();
  w.add_string("general.architecture", "mamba");
  auto bytes = w.to_bytes();
  auto f = GgufFile::parse(bytes);
  ASSERT_TRUE(f.is_ok());
  auto s = model_spec_from_gguf(*f);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("unsupported architecture 'mamba'"), std::string::npos);
}

TEST(ModelSpec, HeadsMustDivideEvenly) {
  GgufWriter w = spec_writer("llama", 1, 12, 16, 3, 2);
  auto bytes = w.to_bytes();
  auto f = GgufFile::parse(bytes);
  ASSERT_TRUE(f.is_ok());
  auto s = model_spec_from_gguf(*f);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("not a multiple of head_count_kv"), std::string::npos) << s.status().message();
}

}  // namespace
}  // namespace agentkv
