// Loading a model file into what every engine front needs: the weights and
// the tokenizer read from the same GGUF.
#pragma once

#include <memory>
#include <string>

#include "model/weights.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace agentkv {

struct LoadedModel {
  std::shared_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

Result<LoadedModel> load_model_file(const std::string& path, int n_threads);

}  // namespace agentkv
