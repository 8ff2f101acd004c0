#include "runtime/decode_layout.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>
#include <vector>

#include "backend/backend.h"

namespace agentkv {

int64_t lay_out_for_decode(Model& m, int n_threads) {
  std::vector<DenseTensor*> todo;
  auto want = [&](DenseTensor& w) {
    const int64_t unit = backend_cpu_k8_unit(w.packed_type);
    if (!w.k8 && !w.packed.empty() && w.shape.size() == 2 && unit > 0 && w.shape[1] % unit == 0)
      todo.push_back(&w);
  };
  for (LayerWeights& l : m.w.layers) {
    for (DenseTensor* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) want(*w);
  }
  want(m.w.output.empty() ? m.w.tok_embd : m.w.output);
  // Matrices in parallel, largest first (the output matrix can be a fifth
  // of a file): 1.2 s for Qwen2.5-Coder-1.5B on one thread.
  std::sort(todo.begin(), todo.end(), [](const DenseTensor* a, const DenseTensor* b) {
    return a->packed.size() > b->packed.size();
  });
  std::atomic<size_t> next{0};
  std::atomic<int64_t> bytes{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < todo.size();) {
      DenseTensor& w = *todo[i];
      const QuantMatrix q{w.packed_type, w.packed.data(), w.packed_row_bytes, w.shape[0], w.shape[1]};
      WeightBytes rec = backend_cpu_k8_records(q);
      bytes += static_cast<int64_t>(rec.size());
      w.packed = std::move(rec);  // the file's blocks are freed: one copy
      w.k8 = true;
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::max(1, n_threads); ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return bytes.load();
}

}  // namespace agentkv
