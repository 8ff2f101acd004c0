// Loads a Model from a GGUF file: typed hyper-parameters (model_spec), then
// every tensor through create_tensor, which checks name, shape and type and
// dequantizes to the compute dtype.
#pragma once

#include <memory>
#include <string>

#include "format/gguf.h"
#include "model/weights.h"
#include "util/status.h"

namespace agentkv {

struct LoadOptions {
  DType dtype = DType::kF32;
  int n_threads = 1;  // dequantization threads
  // Keep the file's bytes of quantized matrices (DenseTensor::packed) for
  // decode. Costs the file's size again in RAM.
  bool keep_packed = true;
};

Result<std::shared_ptr<Model>> model_load(const GgufFile& file, const LoadOptions& opts);
Result<std::shared_ptr<Model>> model_load_file(const std::string& path, const LoadOptions& opts);

}  // namespace agentkv
