#include "runtime/layer_swap_probe.h"

#include <cstring>

#include "backend/backend.h"
#include "kv/kv_storage.h"
#include "runtime/runner.h"
#include "util/stats.h"

namespace agentkv {

namespace {

constexpr int32_t kBlockTokens = 16;

// Mean over rows of KL(p || q) of two [rows, vocab] logits arrays, in double.
double mean_kl(const std::vector<float>& p_logits, const std::vector<float>& q_logits, int64_t vocab) {
  const int64_t rows = static_cast<int64_t>(p_logits.size()) / vocab;
  double total = 0;
  for (int64_t r = 0; r < rows; ++r)
    total += kl_divergence(&p_logits[r * vocab], &q_logits[r * vocab], vocab);
  return rows > 0 ? total / double(rows) : 0;
}

}  // namespace

struct LayerSwapProbe::Impl {
  std::shared_ptr<const Model> model;
  std::unique_ptr<backend_i> backend;
  std::unique_ptr<KvStorage> kv;
  std::unique_ptr<Runner> runner;
  int32_t n = 0, nb = 0;  // prompt tokens, and blocks per region

  // The prompt in region `region` under adapter `a`, with logits from
  // first_scored on; keep_layer >= 0 writes every layer but that one (the
  // mix keeps the producer's K/V there).
  Step step(const std::vector<int32_t>& toks, const Adapter* a, int32_t region, int32_t keep_layer,
            int32_t first_scored) const {
    Step st;
    st.adapters = {a};
    std::vector<int32_t> blocks(nb);
    for (int32_t i = 0; i < nb; ++i) blocks[i] = region * nb + i;
    if (keep_layer >= 0) {
      std::vector<uint8_t> m(model->spec.n_layers, 1);
      m[keep_layer] = 0;
      st.write_masks.push_back(std::move(m));
    }
    for (int32_t p = 0; p < n; ++p) {
      TokenRow row;
      row.token = toks[p];
      row.pos = p;
      row.slot = kv_slot(blocks, p, kBlockTokens);
      row.logits = p >= first_scored;
      row.adapter = 0;
      row.write_mask = keep_layer >= 0 ? 0 : -1;
      st.rows.push_back(row);
    }
    st.seqs = {StepSeq{0, n, blocks}};
    return st;
  }
};

LayerSwapProbe::LayerSwapProbe(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LayerSwapProbe::~LayerSwapProbe() = default;

Result<std::unique_ptr<LayerSwapProbe>> LayerSwapProbe::create(std::shared_ptr<const Model> model,
                                                               int n_threads, int32_t n_tokens) {
  if (n_tokens < 1) return make_error(ErrorCode::kInvalidArgument, "layer-swap probe: no tokens");
  auto impl = std::make_unique<Impl>();
  const ModelSpec& s = model->spec;
  impl->n = n_tokens;
  impl->nb = (n_tokens + kBlockTokens - 1) / kBlockTokens;
  AKV_ASSIGN_OR_RETURN(KvStorage kv,
                       KvStorage::create({s.n_layers, s.n_kv_heads, s.head_dim, kBlockTokens}, 3 * impl->nb));
  impl->kv = std::make_unique<KvStorage>(std::move(kv));
  impl->backend = backend_cpu_init(BackendConfig{n_threads});
  impl->model = std::move(model);
  impl->runner = std::make_unique<Runner>(impl->model, impl->backend.get(), impl->kv.get());
  return std::unique_ptr<LayerSwapProbe>(new LayerSwapProbe(std::move(impl)));
}

Status LayerSwapProbe::add_sensitivity(const std::vector<int32_t>& toks, const Adapter& producer,
                                       const Adapter& consumer, int32_t first_scored,
                                       std::vector<double>* sensitivity) {
  Impl& g = *impl_;
  if (static_cast<int32_t>(toks.size()) != g.n) {
    return make_error(ErrorCode::kInvalidArgument, "layer-swap probe: ", toks.size(), " tokens, made for ",
                      g.n);
  }
  const int32_t n_layers = g.model->spec.n_layers;
  KvStorage& kv = *g.kv;
  const size_t row_bytes = size_t(kv.geometry().row_bytes());
  std::vector<float> ref, got;
  AKV_RETURN_IF_ERROR(g.runner->execute(g.step(toks, &producer, 0, -1, first_scored), &got));
  AKV_RETURN_IF_ERROR(g.runner->execute(g.step(toks, &consumer, 1, -1, first_scored), &ref));
  for (int32_t l = 0; l < n_layers; ++l) {
    // The mix region: the producer's K/V at layer l (the consumer's rows
    // keep it there and write every other layer).
    for (int32_t p = 0; p < g.n; ++p) {
      const int32_t b = p / kBlockTokens, o = p % kBlockTokens;
      std::memcpy(kv.k_at(l, 2 * g.nb + b, o), kv.k_at(l, b, o), row_bytes);
      std::memcpy(kv.v_at(l, 2 * g.nb + b, o), kv.v_at(l, b, o), row_bytes);
    }
    AKV_RETURN_IF_ERROR(g.runner->execute(g.step(toks, &consumer, 2, l, first_scored), &got));
    (*sensitivity)[l] += mean_kl(ref, got, g.model->spec.n_vocab);
  }
  return Status::ok();
}

}  // namespace agentkv
