#include "runtime/loaded_model.h"

#include "backend/backend.h"
#include "format/gguf.h"
#include "model/loader.h"

namespace agentkv {

Result<LoadedModel> load_model_file(const std::string& path, int n_threads) {
  auto file = GgufFile::open(path);
  if (!file.is_ok()) return file.status();
  LoadOptions lo;
  lo.n_threads = n_threads;
  lo.packed_only = backend_cpu_reads_packed;  // one copy of the weights
  auto model = model_load(*file, lo);
  if (!model.is_ok()) return model.status().with_context(path);
  LoadedModel out;
  out.model = std::move(model).value();
  auto vocab = vocab_from_gguf(*file, out.model->spec.n_vocab);
  if (!vocab.is_ok()) return vocab.status().with_context(path);
  auto tok = Tokenizer::create(std::move(vocab).value());
  if (!tok.is_ok()) return tok.status().with_context(path);
  out.tokenizer = std::make_unique<Tokenizer>(std::move(tok).value());
  return out;
}

}  // namespace agentkv
