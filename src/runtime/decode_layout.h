// The engine's q4_K, q6_K and q5_0 matrices in the CPU backend's decode layout
// (backend_cpu_k8_records, QuantMatrix::k8) in place of the file's blocks:
// one copy of each, read by decode with no horizontal reduction, by prefill
// through its per-call panels, with the file layout's bits
// (ServingOptions::decode_layout).
#pragma once

#include <cstdint>

#include "model/weights.h"

namespace agentkv {

// Lays out the layer matrices and an untied output matrix of those types
// (a tied one is the token embedding, whose rows embed() decodes from the
// file's blocks), on n_threads threads. Returns the bytes laid out.
int64_t lay_out_for_decode(Model& m, int n_threads);

}  // namespace agentkv
