// The PEFT loader: values round-trip, scales, the RoPE permutation of q/k B
// for llama-family bases, and every malformed adapter failing cleanly.
#include <gtest/gtest.h>

#include <cmath>

#include "adapter/adapter_check.h"
#include "adapter/peft_loader.h"
#include "adapter_test_util.h"

namespace agentkv {
namespace {

using test::expect_error;
using test::kTinyVocab;
using test::PeftFiles;

Result<Adapter> load(const PeftFiles& f, const ModelSpec& s, std::optional<AdapterKind> kind = std::nullopt) {
  const std::string cfg = f.config_text();
  const std::vector<uint8_t> st = f.tensor_bytes();
  return load_peft_adapter_bytes(cfg, st, s, kTinyVocab, kind, "test-adapter");
}

// The permutation in the terms of convert_hf_to_gguf.py, written as a plain
// strided copy: view rows as (n_head, 2, half), swap axes 1 and 2, flatten.
std::vector<float> reference_permute(const std::vector<float>& w, int64_t rows, int64_t cols, int64_t n_head) {
  const int64_t half = rows / n_head / 2;
  // Strides of the source view (n_head, 2, half, cols) in rows.
  const int64_t src_stride[3] = {2 * half, half, 1};
  std::vector<float> out;
  for (int64_t h = 0; h < n_head; ++h)        // destination view (n_head, half, 2, cols), C order
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t src_row = h * src_stride[0] + j * src_stride[1] + i * src_stride[2];
        out.insert(out.end(), w.begin() + src_row * cols, w.begin() + (src_row + 1) * cols);
      }
  return out;
}

TEST(PeftLoader, ValuesRoundTripQwen2NoPermutation) {
  const ModelSpec s = test::tiny_spec("qwen2");
  PeftFiles f = test::peft_adapter(s, 2, {LoraTarget::kQ, LoraTarget::kK, LoraTarget::kDown}, 16);
  auto a = load(f, s);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  EXPECT_EQ(a->kind, AdapterKind::kLora);
  EXPECT_EQ(a->rank, 2);
  ASSERT_EQ(a->layers.size(), 2u);
  EXPECT_EQ(a->id.size(), 32u);
  const LoraMatrix& q = a->layers[1].at(LoraTarget::kQ);
  EXPECT_EQ(q.rank, 2);
  EXPECT_EQ(q.d_in, 16);
  EXPECT_EQ(q.d_out, 16);
  EXPECT_FLOAT_EQ(q.scale, 8.0f);
  EXPECT_EQ(q.a, test::ramp(2 * 16, test::tag_of(1, LoraTarget::kQ, false)));
  EXPECT_EQ(q.b, test::ramp(16 * 2, test::tag_of(1, LoraTarget::kQ, true)));
  const LoraMatrix& down = a->layers[0].at(LoraTarget::kDown);
  EXPECT_EQ(down.d_in, 24);
  EXPECT_EQ(down.d_out, 16);
  EXPECT_TRUE(a->layers[0].at(LoraTarget::kV).empty());
}

TEST(PeftLoader, RopePermutationMatchesTheConverterFormula) {
  // Hand case: 8 rows, 2 heads -> each head's rows [0 1 | 2 3] become [0 2 1 3].
  std::vector<float> w = {0, 1, 2, 3, 4, 5, 6, 7};
  ASSERT_TRUE(permute_rows_for_rope(&w, 8, 1, 2).is_ok());
  EXPECT_EQ(w, (std::vector<float>{0, 2, 1, 3, 4, 6, 5, 7}));
  // Random-ish larger cases against the strided reference.
  for (auto [rows, cols, heads] : {std::tuple<int64_t, int64_t, int32_t>{24, 3, 3}, {64, 5, 4}, {16, 2, 8}}) {
    std::vector<float> m = test::ramp(rows * cols, 1.0f);
    const std::vector<float> want = reference_permute(m, rows, cols, heads);
    ASSERT_TRUE(permute_rows_for_rope(&m, rows, cols, heads).is_ok());
    EXPECT_EQ(m, want) << rows << "x" << cols << " heads " << heads;
  }
  std::vector<float> bad(6);
  EXPECT_FALSE(permute_rows_for_rope(&bad, 6, 1, 2).is_ok());
}

TEST(PeftLoader, LlamaPermutesQAndKRowsOfBOnly) {
  const ModelSpec s = test::tiny_spec("llama");
  PeftFiles f = test::peft_adapter(s, 2, {LoraTarget::kQ, LoraTarget::kK, LoraTarget::kV});
  auto a = load(f, s);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  for (LoraTarget t : {LoraTarget::kQ, LoraTarget::kK}) {
    const LoraBaseShape b = lora_base_shape(s, t);
    const LoraMatrix& m = a->layers[0].at(t);
    EXPECT_EQ(m.a, test::ramp(2 * b.d_in, test::tag_of(0, t, false))) << "A is not permuted";
    const int32_t heads = t == LoraTarget::kQ ? s.n_heads : s.n_kv_heads;
    EXPECT_EQ(m.b, reference_permute(test::ramp(b.d_out * 2, test::tag_of(0, t, true)), b.d_out, 2, heads));
  }
  const LoraMatrix& v = a->layers[0].at(LoraTarget::kV);
  EXPECT_EQ(v.b, test::ramp(8 * 2, test::tag_of(0, LoraTarget::kV, true))) << "v is not permuted";
}

TEST(PeftLoader, RsloraAlphaAndRankPatterns) {
  const ModelSpec s = test::tiny_spec("qwen3");
  PeftFiles f = test::peft_adapter(s, 4, {LoraTarget::kQ});
  f.config["use_rslora"] = true;
  auto a = load(f, s);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  EXPECT_FLOAT_EQ(a->layers[0].at(LoraTarget::kQ).scale, 16.0f / 2.0f);  // alpha / sqrt(4)

  // layer 1's q_proj has rank 2 and alpha 3 through the patterns.
  PeftFiles g;
  g.config = test::peft_config(4, 16, {"q_proj"});
  g.config["rank_pattern"] = {{"model.layers.1.self_attn.q_proj", 2}};
  g.config["alpha_pattern"] = {{"layers.1.self_attn.q_proj", 3}};
  for (int32_t l = 0; l < 2; ++l) {
    const int32_t r = l == 1 ? 2 : 4;
    g.tensors.add_f32(peft_tensor_name(l, LoraTarget::kQ, false), {r, 16}, test::ramp(r * 16, 0));
    g.tensors.add_f32(peft_tensor_name(l, LoraTarget::kQ, true), {16, r}, test::ramp(16 * r, 0));
  }
  auto b = load(g, s);
  ASSERT_TRUE(b.is_ok()) << b.status().message();
  EXPECT_EQ(b->layers[0].at(LoraTarget::kQ).rank, 4);
  EXPECT_FLOAT_EQ(b->layers[0].at(LoraTarget::kQ).scale, 4.0f);
  EXPECT_EQ(b->layers[1].at(LoraTarget::kQ).rank, 2);
  EXPECT_FLOAT_EQ(b->layers[1].at(LoraTarget::kQ).scale, 1.5f);

  g.config["rank_pattern"] = {{"^model.*q_proj$", 2}};
  expect_error(load(g, s), "is a regular expression");
}

TEST(PeftLoader, AllLinearLayersToTransformAndAlora) {
  const ModelSpec s = test::tiny_spec("qwen2");
  PeftFiles f = test::peft_adapter(s, 2, {LoraTarget::kQ, LoraTarget::kK, LoraTarget::kV, LoraTarget::kO,
                                          LoraTarget::kGate, LoraTarget::kUp, LoraTarget::kDown});
  f.config["target_modules"] = "all-linear";
  f.config["alora_invocation_tokens"] = {5, 7, 99};
  auto a = load(f, s);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  EXPECT_EQ(a->kind, AdapterKind::kAlora);
  EXPECT_EQ(a->invocation_tokens, (std::vector<int32_t>{5, 7, 99}));
  for (LoraTarget t : kAllLoraTargets) EXPECT_FALSE(a->layers[1].at(t).empty());

  auto as_lora = load(f, s, AdapterKind::kLora);
  ASSERT_TRUE(as_lora.is_ok());
  EXPECT_TRUE(as_lora->invocation_tokens.empty());
  EXPECT_NE(as_lora->id, a->id) << "the kind is part of the identity";
  auto icarus = load(f, s, AdapterKind::kIcarus);
  ASSERT_TRUE(icarus.is_ok());
  EXPECT_EQ(icarus->kind, AdapterKind::kIcarus);

  PeftFiles one;
  one.config = test::peft_config(2, 16, {"q_proj"});
  one.config["layers_to_transform"] = 1;
  one.tensors.add_f32(peft_tensor_name(1, LoraTarget::kQ, false), {2, 16}, test::ramp(32, 0));
  one.tensors.add_f32(peft_tensor_name(1, LoraTarget::kQ, true), {16, 2}, test::ramp(32, 0));
  auto b = load(one, s);
  ASSERT_TRUE(b.is_ok()) << b.status().message();
  EXPECT_TRUE(b->layers[0].at(LoraTarget::kQ).empty());
  EXPECT_FALSE(b->layers[1].at(LoraTarget::kQ).empty());
  one.config["layers_to_transform"] = {0};
  expect_error(load(one, s), "is in layer 1, which layers_to_transform excludes");
  one.config["layers_to_transform"] = {7};
  expect_error(load(one, s), "layers_to_transform lists layer 7, past the base model's 2 layers");
}

TEST(PeftLoaderBad, WrongBaseShape) {
  const ModelSpec s = test::tiny_spec();
  PeftFiles f;
  f.config = test::peft_config(2, 16, {"k_proj"});
  for (int32_t l = 0; l < 2; ++l) {
    f.tensors.add_f32(peft_tensor_name(l, LoraTarget::kK, false), {2, 16}, test::ramp(32, 0));
    f.tensors.add_f32(peft_tensor_name(l, LoraTarget::kK, true), {16, 2}, test::ramp(32, 0));  // k is (8, 16)
  }
  expect_error(load(f, s), "wrong base shape: 'base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight' "
                           "(lora_B) is (16, 2), the base k_proj is (8, 16)");
  PeftFiles g;
  g.config = test::peft_config(2, 16, {"q_proj"});
  for (int32_t l = 0; l < 2; ++l) {
    g.tensors.add_f32(peft_tensor_name(l, LoraTarget::kQ, false), {2, 12}, test::ramp(24, 0));
    g.tensors.add_f32(peft_tensor_name(l, LoraTarget::kQ, true), {16, 2}, test::ramp(32, 0));
  }
  expect_error(load(g, s), "(lora_A) is (2, 12), the base q_proj is (16, 16)");
}

TEST(PeftLoaderBad, MissingTensor) {
  const ModelSpec s = test::tiny_spec();
  PeftFiles f;
  f.config = test::peft_config(2, 16, {"q_proj"});
  f.tensors.add_f32(peft_tensor_name(0, LoraTarget::kQ, false), {2, 16}, test::ramp(32, 0));
  f.tensors.add_f32(peft_tensor_name(0, LoraTarget::kQ, true), {16, 2}, test::ramp(32, 0));
  f.tensors.add_f32(peft_tensor_name(1, LoraTarget::kQ, false), {2, 16}, test::ramp(32, 0));
  expect_error(load(f, s), "missing tensor 'base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight'");
  PeftFiles g = test::peft_adapter(s, 2, {LoraTarget::kQ});
  g.config["target_modules"] = {"q_proj", "v_proj"};
  expect_error(load(g, s), "missing tensor 'base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight'");
}

TEST(PeftLoaderBad, RankMismatch) {
  const ModelSpec s = test::tiny_spec();
  PeftFiles f;
  f.config = test::peft_config(2, 16, {"q_proj"});
  for (int32_t l = 0; l < 2; ++l) {
    f.tensors.add_f32(peft_tensor_name(l, LoraTarget::kQ, false), {2, 16}, test::ramp(32, 0));
    f.tensors.add_f32(peft_tensor_name(l, LoraTarget::kQ, true), {16, 3}, test::ramp(48, 0));
  }
  expect_error(load(f, s), "rank mismatch: layer 0 q_proj lora_A (2, 16) has rank 2, lora_B (16, 3) has rank 3");
  PeftFiles g = test::peft_adapter(s, 2, {LoraTarget::kQ});
  g.config["r"] = 4;
  expect_error(load(g, s), "rank mismatch: layer 0 q_proj has rank 2, the config says 4");
}

TEST(PeftLoaderBad, CorruptSafetensors) {
  const ModelSpec s = test::tiny_spec();
  PeftFiles f = test::peft_adapter(s, 2, {LoraTarget::kQ});
  const std::string cfg = f.config_text();
  std::vector<uint8_t> st = f.tensor_bytes();
  std::vector<uint8_t> bad = st;
  bad[8] = '[';  // the JSON now starts "[" and is not closed
  expect_error(load_peft_adapter_bytes(cfg, bad, s, kTinyVocab, std::nullopt, "x"),
               "adapter_model.safetensors: header is not valid JSON");
  bad = st;
  bad[7] = 0x10;  // header length ~2^60
  expect_error(load_peft_adapter_bytes(cfg, bad, s, kTinyVocab, std::nullopt, "x"), "past the end of the file");
  bad.assign(st.begin(), st.begin() + 20);
  expect_error(load_peft_adapter_bytes(cfg, bad, s, kTinyVocab, std::nullopt, "x"), "past the end of the file (size 20)");
}

TEST(PeftLoaderBad, UnknownTargetModule) {
  const ModelSpec s = test::tiny_spec();
  PeftFiles f = test::peft_adapter(s, 2, {LoraTarget::kQ});
  f.config["target_modules"] = {"q_proj", "lm_head"};
  expect_error(load(f, s), "unsupported target module 'lm_head'");
  f.config["target_modules"] = {"q_proj", "embed_tokens"};
  expect_error(load(f, s), "unsupported target module 'embed_tokens'");
  PeftFiles g = test::peft_adapter(s, 2, {LoraTarget::kQ});
  g.tensors.add_f32("base_model.model.lm_head.lora_A.weight", {2, 16}, test::ramp(32, 0));
  expect_error(load(g, s), "unsupported target module 'lm_head'");
  f.config["target_modules"] = "q_proj|v_proj";
  expect_error(load(f, s), "is a regular expression");
}

TEST(PeftLoaderBad, InvocationTokensOutsideVocabulary) {
  const ModelSpec s = test::tiny_spec();
  PeftFiles f = test::peft_adapter(s, 2, {LoraTarget::kQ});
  f.config["alora_invocation_tokens"] = {1, 100};
  expect_error(load(f, s), "invocation token 100 outside the vocabulary (100)");
  f.config["alora_invocation_tokens"] = {-3};
  expect_error(load(f, s), "invocation token -3 outside the vocabulary (100)");
  f.config["alora_invocation_tokens"] = {"a"};
  expect_error(load(f, s), "alora_invocation_tokens entry must be an integer");
  f.config["alora_invocation_tokens"] = nullptr;
  expect_error(load(f, s, AdapterKind::kAlora), "kind alora needs invocation tokens");
}

TEST(PeftLoaderBad, LayerPastNLayers) {
  const ModelSpec s = test::tiny_spec();
  PeftFiles f = test::peft_adapter(s, 2, {LoraTarget::kQ});
  f.tensors.add_f32(peft_tensor_name(2, LoraTarget::kQ, false), {2, 16}, test::ramp(32, 0));
  expect_error(load(f, s), "layer index 2 past the base model's 2 layers");
  PeftFiles g = test::peft_adapter(s, 2, {LoraTarget::kQ});
  g.tensors.add_f32("base_model.model.model.layers.99999999999.self_attn.q_proj.lora_A.weight", {1}, {0});
  expect_error(load(g, s), "bad layer index");
}

TEST(PeftLoaderBad, Config) {
  const ModelSpec s = test::tiny_spec();
  PeftFiles f = test::peft_adapter(s, 2, {LoraTarget::kQ});
  const std::vector<uint8_t> st = f.tensor_bytes();
  auto with = [&](const std::string& cfg) {
    return load_peft_adapter_bytes(cfg, st, s, kTinyVocab, std::nullopt, "x");
  };
  expect_error(with("{"), "adapter_config.json is not valid JSON");
  expect_error(with("[]"), "must be a JSON object");
  expect_error(with(R"({"peft_type": "IA3", "r": 2})"), "peft_type 'IA3' is not supported");
  expect_error(with(R"({"peft_type": "LORA", "r": 2, "r": 4, "target_modules": ["q_proj"]})"), "duplicate key 'r'");
  expect_error(with(R"({"peft_type": "LORA", "r": "2", "target_modules": ["q_proj"]})"), "r must be an integer");
  expect_error(with(R"({"peft_type": "LORA", "r": 0, "target_modules": ["q_proj"]})"), "r = 0 out of range");
  expect_error(with(R"({"peft_type": "LORA", "r": 2})"), "target_modules missing");
  expect_error(with(R"({"peft_type": "LORA", "r": 2, "target_modules": ["q_proj"], "use_dora": true})"),
               "use_dora is not supported");
  expect_error(with(R"({"peft_type": "LORA", "r": 2, "target_modules": ["q_proj"], "modules_to_save": ["lm_head"]})"),
               "modules_to_save is not supported");
  expect_error(with(R"({"peft_type": "LORA", "r": 2, "target_modules": ["q_proj"], "bias": "all"})"),
               "bias \"all\" is not supported");
  expect_error(with(R"({"peft_type": "LORA", "r": 2, "target_modules": ["q_proj"], "lora_alpha": "x"})"),
               "lora_alpha must be a number");
  // fan_in_fan_out is accepted (PEFT forces it false for nn.Linear).
  auto ok = with(R"({"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["q_proj"], "fan_in_fan_out": true})");
  EXPECT_TRUE(ok.is_ok()) << ok.status().message();
}

TEST(PeftLoaderBad, MissingDirectory) {
  auto r = load_peft_adapter("/nonexistent/agentkv-adapter", test::tiny_spec(), kTinyVocab);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(r.status().message().find("adapter_config.json"), std::string::npos);
}

}  // namespace
}  // namespace agentkv
