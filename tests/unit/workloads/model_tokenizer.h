// The real model's tokenizer for the bench tests that build prompts, loaded
// once; REQUIRE_TOKENIZER() skips a test when the model file is absent
// (fails it under CI) and binds `tok`.
#pragma once

#include <optional>

#include "../../ci_required.h"
#include "../../source_dir.h"
#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

namespace agentkv::test {

inline const Tokenizer* model_tokenizer() {
  static const std::optional<Tokenizer> tok = []() -> std::optional<Tokenizer> {
    auto f = GgufFile::open(source_dir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    if (!f.is_ok()) return std::nullopt;
    auto v = vocab_from_gguf(*f, 49152);
    if (!v.is_ok()) return std::nullopt;
    auto t = Tokenizer::create(std::move(v).value());
    if (!t.is_ok()) return std::nullopt;
    return std::move(t).value();
  }();
  return tok ? &*tok : nullptr;
}

}  // namespace agentkv::test

#define REQUIRE_TOKENIZER()                                                     \
  const Tokenizer* tok_ptr = ::agentkv::test::model_tokenizer();                \
  AGENTKV_REQUIRE(tok_ptr == nullptr, "model file missing (scripts/setup.sh)"); \
  const Tokenizer& tok = *tok_ptr
