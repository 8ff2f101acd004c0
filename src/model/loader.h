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
  // Keep the file's bytes of quantized matrices (DenseTensor::packed), which
  // the kernels read directly.
  bool keep_packed = true;
  // Types whose matrices the compute backend reads packed: those keep no f32
  // copy (DenseTensor::data stays empty), so the weights are held once, at
  // the file's size. Null keeps the f32 copy of everything (tools and tests
  // that read the dequantized values).
  bool (*packed_only)(uint32_t ggml_type) = nullptr;
};

Result<std::shared_ptr<Model>> model_load(const GgufFile& file, const LoadOptions& opts);
Result<std::shared_ptr<Model>> model_load_file(const std::string& path, const LoadOptions& opts);

}  // namespace agentkv
