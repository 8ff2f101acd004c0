// The llama.cpp GGUF LoRA loader: shapes in ggml order, llama.cpp's scale
// rule, invocation tokens, and malformed adapters.
#include <gtest/gtest.h>

#include "adapter/gguf_lora_loader.h"
#include "adapter_test_util.h"

namespace agentkv {
namespace {

using test::expect_error;
using test::kTinyVocab;

Result<Adapter> load(const GgufWriter& w, const ModelSpec& s, std::optional<AdapterKind> kind = std::nullopt) {
  const std::vector<uint8_t> bytes = w.to_bytes();
  return load_gguf_lora_adapter_bytes(bytes, s, kTinyVocab, kind, "test.gguf");
}

TEST(GgufLoraLoader, ValuesAndScale) {
  const ModelSpec s = test::tiny_spec();
  GgufWriter w = test::gguf_adapter_header("llama", 6);
  for (int32_t l = 0; l < 2; ++l) {
    test::gguf_add_pair(w, s, l, LoraTarget::kQ, 2);
    test::gguf_add_pair(w, s, l, LoraTarget::kDown, 3);
  }
  w.add_tensor_f32("blk.0.attn_norm.weight", {16}, std::vector<float>(16, 1.0f));  // skipped, like llama.cpp
  auto a = load(w, s);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  EXPECT_EQ(a->kind, AdapterKind::kLora);
  EXPECT_EQ(a->rank, 3);
  const LoraMatrix& q = a->layers[1].at(LoraTarget::kQ);
  EXPECT_EQ(q.rank, 2);
  EXPECT_FLOAT_EQ(q.scale, 3.0f);  // alpha 6 / rank 2, q/k not permuted again
  EXPECT_EQ(q.a, test::ramp(2 * 16, test::tag_of(1, LoraTarget::kQ, false)));
  EXPECT_EQ(q.b, test::ramp(16 * 2, test::tag_of(1, LoraTarget::kQ, true)));
  const LoraMatrix& d = a->layers[0].at(LoraTarget::kDown);
  EXPECT_EQ(d.d_in, 24);
  EXPECT_EQ(d.d_out, 16);
  EXPECT_FLOAT_EQ(d.scale, 2.0f);
}

TEST(GgufLoraLoader, AlphaZeroMeansScaleOneAndF16Tensors) {
  const ModelSpec s = test::tiny_spec();
  GgufWriter w = test::gguf_adapter_header("llama", 0);
  // f16 1.0 = 0x3c00: A (2, 16) all ones, B (16, 2) all ones.
  std::vector<uint8_t> ones(2 * 16 * 2);
  for (size_t i = 0; i < ones.size(); i += 2) ones[i + 1] = 0x3c;
  for (int32_t l = 0; l < 2; ++l) {
    w.add_tensor(test::gguf_name(l, LoraTarget::kV, false), GgmlType::kF16, {16, 2}, ones);
    w.add_tensor(test::gguf_name(l, LoraTarget::kV, true), GgmlType::kF16, {2, 8}, std::vector<uint8_t>(ones.begin(), ones.begin() + 32));
  }
  auto a = load(w, s);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  EXPECT_FLOAT_EQ(a->layers[0].at(LoraTarget::kV).scale, 1.0f);
  EXPECT_EQ(a->layers[0].at(LoraTarget::kV).b, std::vector<float>(16, 1.0f));
}

TEST(GgufLoraLoader, InvocationTokens) {
  const ModelSpec s = test::tiny_spec();
  GgufWriter w = test::gguf_adapter_header();
  test::gguf_add_pair(w, s, 0, LoraTarget::kQ, 2);
  w.add_kv("adapter.alora.invocation_tokens",
           GgufValue::of_array(GgufType::kUint32, {GgufValue::of_uint(GgufType::kUint32, 3),
                                                   GgufValue::of_uint(GgufType::kUint32, 4)}));
  auto a = load(w, s);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  EXPECT_EQ(a->kind, AdapterKind::kAlora);
  EXPECT_EQ(a->invocation_tokens, (std::vector<int32_t>{3, 4}));

  GgufWriter bad = test::gguf_adapter_header();
  test::gguf_add_pair(bad, s, 0, LoraTarget::kQ, 2);
  bad.add_int32_array("adapter.alora.invocation_tokens", {3, 100});
  expect_error(load(bad, s), "invocation token 100 outside the vocabulary (100)");
  GgufWriter str = test::gguf_adapter_header();
  test::gguf_add_pair(str, s, 0, LoraTarget::kQ, 2);
  str.add_string_array("adapter.alora.invocation_tokens", {"x"});
  expect_error(load(str, s), "must be an array of u32");
}

TEST(GgufLoraLoaderBad, OtherArchitecture) {
  const ModelSpec s = test::tiny_spec("llama");
  GgufWriter w = test::gguf_adapter_header("qwen2");
  test::gguf_add_pair(w, s, 0, LoraTarget::kQ, 2);
  expect_error(load(w, s), "adapter is for architecture 'qwen2', the base model is 'llama'");
}

TEST(GgufLoraLoaderBad, NotAnAdapter) {
  const ModelSpec s = test::tiny_spec();
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  expect_error(load(w, s), "general.type is missing (a base model file?)");
  w.add_string("general.type", "model");
  expect_error(load(w, s), "general.type is 'model', expected 'adapter'");
  GgufWriter c = test::gguf_adapter_header();
  c.add_string("adapter.type", "control_vector");  // duplicate key: the reader refuses the file
  expect_error(load(c, s), "duplicate key 'adapter.type'");
  GgufWriter e = test::gguf_adapter_header();
  expect_error(load(e, s), "no lora_a / lora_b tensors");
}

TEST(GgufLoraLoaderBad, ShapesRanksAndNames) {
  const ModelSpec s = test::tiny_spec();
  GgufWriter w = test::gguf_adapter_header();
  w.add_tensor_f32(test::gguf_name(0, LoraTarget::kK, false), {16, 2}, test::ramp(32, 0));
  w.add_tensor_f32(test::gguf_name(0, LoraTarget::kK, true), {2, 16}, test::ramp(32, 0));  // k is (8, 16)
  expect_error(load(w, s), "wrong base shape: 'blk.0.attn_k.weight.lora_b' (lora_B) is (16, 2), the base k_proj is (8, 16)");

  GgufWriter r = test::gguf_adapter_header();
  r.add_tensor_f32(test::gguf_name(0, LoraTarget::kQ, false), {16, 2}, test::ramp(32, 0));
  r.add_tensor_f32(test::gguf_name(0, LoraTarget::kQ, true), {3, 16}, test::ramp(48, 0));
  expect_error(load(r, s), "rank mismatch: layer 0 q_proj lora_A (2, 16) has rank 2, lora_B (16, 3) has rank 3");

  GgufWriter m = test::gguf_adapter_header();
  m.add_tensor_f32(test::gguf_name(1, LoraTarget::kUp, false), {16, 2}, test::ramp(32, 0));
  expect_error(load(m, s), "missing tensor 'blk.1.ffn_up.weight.lora_b'");

  GgufWriter l = test::gguf_adapter_header();
  test::gguf_add_pair(l, s, 0, LoraTarget::kQ, 2);
  l.add_tensor_f32("blk.2.attn_q.weight.lora_a", {16, 2}, test::ramp(32, 0));
  expect_error(load(l, s), "layer index 2 past the base model's 2 layers");

  GgufWriter t = test::gguf_adapter_header();
  t.add_tensor_f32("output.weight.lora_a", {16, 2}, test::ramp(32, 0));
  expect_error(load(t, s), "unsupported target module 'output'");
  GgufWriter u = test::gguf_adapter_header();
  u.add_tensor_f32("blk.0.attn_qkv.weight.lora_a", {16, 2}, test::ramp(32, 0));
  expect_error(load(u, s), "unsupported target module 'attn_qkv'");
  GgufWriter x = test::gguf_adapter_header();
  x.add_tensor_f32("blk.0.attn_q.weight", {16, 16}, test::ramp(256, 0));
  expect_error(load(x, s), "unexpected tensor 'blk.0.attn_q.weight'");
  GgufWriter d3 = test::gguf_adapter_header();
  d3.add_tensor_f32(test::gguf_name(0, LoraTarget::kQ, false), {16, 2, 1}, test::ramp(32, 0));
  d3.add_tensor_f32(test::gguf_name(0, LoraTarget::kQ, true), {2, 16}, test::ramp(32, 0));
  expect_error(load(d3, s), "lora_A must be 2-D");
}

TEST(GgufLoraLoaderBad, TruncatedFile) {
  const ModelSpec s = test::tiny_spec();
  GgufWriter w = test::gguf_adapter_header();
  test::gguf_add_pair(w, s, 0, LoraTarget::kQ, 2);
  std::vector<uint8_t> b = w.to_bytes();
  b.resize(b.size() - 4);
  expect_error(load_gguf_lora_adapter_bytes(b, s, kTinyVocab, std::nullopt, "t"), "extends past end of file");
}

}  // namespace
}  // namespace agentkv
