// AdapterRegistry (load from disk, duplicates, unload, find, list, threads),
// content-hash identity rules and the NAME=PATH[:KIND] parser.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "adapter/adapter_identity.h"
#include "adapter/registry.h"
#include "adapter_test_util.h"

namespace agentkv {
namespace {

using test::expect_error;
using test::kTinyVocab;

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() / ("agentkv_adapter_test_" + std::to_string(::getpid()) + "_" +
                                                      std::to_string(counter_++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string path(const std::string& sub = "") const { return sub.empty() ? path_.string() : (path_ / sub).string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

void write_peft(const std::string& dir, const test::PeftFiles& f) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/adapter_config.json") << f.config_text();
  ASSERT_TRUE(f.tensors.write(dir + "/adapter_model.safetensors").is_ok());
}

TEST(AdapterIdentity, SameBytesSameIdNewBytesNewId) {
  const ModelSpec s = test::tiny_spec();
  TempDir tmp;
  test::PeftFiles f = test::peft_adapter(s, 2, {LoraTarget::kQ});
  write_peft(tmp.path("a"), f);
  write_peft(tmp.path("b"), f);  // same bytes, another place
  AdapterRegistry reg;
  auto a = reg.load("alpha", tmp.path("a"), std::nullopt, s, kTinyVocab);
  auto b = reg.load("beta", tmp.path("b"), std::nullopt, s, kTinyVocab);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  ASSERT_TRUE(b.is_ok()) << b.status().message();
  EXPECT_EQ((*a)->id, (*b)->id) << "two names for the same bytes";

  // Same name reloaded with new bytes: a new identity.
  ASSERT_TRUE(reg.unload("alpha").is_ok());
  f.config["lora_alpha"] = 32;
  write_peft(tmp.path("a"), f);
  auto a2 = reg.load("alpha", tmp.path("a"), std::nullopt, s, kTinyVocab);
  ASSERT_TRUE(a2.is_ok());
  EXPECT_NE((*a2)->id, (*a)->id);
  EXPECT_EQ((*a)->name, "alpha") << "the old pointer stays valid after unload";

  // The hash covers the file names and lengths, not just concatenated bytes.
  const uint8_t x[] = {1, 2, 3};
  EXPECT_NE(adapter_content_id(AdapterKind::kLora, {{"a", {x, 1}}, {"b", {x + 1, 2}}}),
            adapter_content_id(AdapterKind::kLora, {{"a", {x, 2}}, {"b", {x + 2, 1}}}));
  EXPECT_NE(adapter_content_id(AdapterKind::kLora, {{"a", {x, 3}}}),
            adapter_content_id(AdapterKind::kIcarus, {{"a", {x, 3}}}));
}

TEST(AdapterRegistry, LoadFindListUnloadDuplicate) {
  const ModelSpec s = test::tiny_spec();
  TempDir tmp;
  write_peft(tmp.path("peft"), test::peft_adapter(s, 2, {LoraTarget::kQ, LoraTarget::kV}));
  GgufWriter w = test::gguf_adapter_header();
  test::gguf_add_pair(w, s, 0, LoraTarget::kQ, 2);
  ASSERT_TRUE(w.write(tmp.path("lora.gguf")).is_ok());

  AdapterRegistry reg;
  ASSERT_TRUE(reg.load("p", tmp.path("peft"), std::nullopt, s, kTinyVocab).is_ok());
  ASSERT_TRUE(reg.load("g", tmp.path("lora.gguf"), AdapterKind::kIcarus, s, kTinyVocab).is_ok());
  auto dup = reg.load("p", tmp.path("lora.gguf"), std::nullopt, s, kTinyVocab);
  expect_error(dup, "an adapter named 'p' is already loaded; unload it first or pick another name");
  ASSERT_NE(reg.find("p"), nullptr);
  EXPECT_EQ(reg.find("p")->source, tmp.path("peft"));
  EXPECT_EQ(reg.find("nope"), nullptr);
  const auto list = reg.list();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].name, "g");
  EXPECT_EQ(list[0].kind, AdapterKind::kIcarus);
  EXPECT_EQ(list[1].name, "p");
  EXPECT_EQ(list[1].kind, AdapterKind::kLora);
  EXPECT_EQ(list[1].id.size(), 32u);

  Status st = reg.unload("nope");
  EXPECT_EQ(st.code(), ErrorCode::kNotFound);
  EXPECT_NE(st.message().find("no adapter named 'nope' is loaded"), std::string::npos);
  EXPECT_TRUE(reg.unload("p").is_ok());
  EXPECT_EQ(reg.find("p"), nullptr);

  expect_error(reg.load("x", tmp.path("missing"), std::nullopt, s, kTinyVocab), "no such adapter");
  expect_error(reg.load("bad name", tmp.path("peft"), std::nullopt, s, kTinyVocab), "may only hold printable ASCII");
  expect_error(reg.load("", tmp.path("peft"), std::nullopt, s, kTinyVocab), "1 to 128 characters");
  // A base model file is not an adapter.
  GgufWriter base;
  base.add_string("general.architecture", "llama");
  ASSERT_TRUE(base.write(tmp.path("base.gguf")).is_ok());
  expect_error(reg.load("b", tmp.path("base.gguf"), std::nullopt, s, kTinyVocab), "not a LoRA adapter");
}

TEST(AdapterRegistry, ConcurrentLoadUnloadFind) {
  const ModelSpec s = test::tiny_spec();
  TempDir tmp;
  write_peft(tmp.path("peft"), test::peft_adapter(s, 2, {LoraTarget::kQ}));
  AdapterRegistry reg;
  std::atomic<int> loaded{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        const std::string name = std::string(1, static_cast<char>('a' + i % 3));
        if (reg.load(name, tmp.path("peft"), std::nullopt, s, kTinyVocab).is_ok()) ++loaded;
        if (auto p = reg.find(name)) {
          EXPECT_EQ(p->layers.size(), 2u);
        }
        if (t % 2) (void)reg.unload(name);
        (void)reg.list();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_GT(loaded.load(), 0);
}


}  // namespace
}  // namespace agentkv
