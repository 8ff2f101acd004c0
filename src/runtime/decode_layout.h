// The engine's q4_K, q6_K, q5_0 and q8_0 matrices in the CPU backend's decode layout
// (backend_cpu_k8_records, QuantMatrix::k8) in place of the file's blocks:
// one copy of each, read by decode with no horizontal reduction, by prefill
// through its per-call panels, with the file layout's bits
// (ServingOptions::decode_layout).
#pragma once

#include <cstdint>

#include "model/weights.h"

namespace agentkv {

// Lays out the layer matrices and the output matrix of those types, on
// n_threads threads; a tied output matrix is the token embedding, whose rows
// Runner::embed then gives back from the records
// (backend_cpu_k8_file_row). Returns the bytes laid out.
int64_t lay_out_for_decode(Model& m, int n_threads);

}  // namespace agentkv
