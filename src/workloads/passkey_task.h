// bench-fidelity's first task: multi-document passkey retrieval. One of the
// documents of filler sentences hides a five-digit pass key, at a varied
// document position; the question asks for it.
#pragma once

#include <vector>

#include "workloads/fidelity_tasks.h"

namespace agentkv {

std::vector<FidelityTask> make_passkey_tasks(const Tokenizer& tok, const FidelityTaskOptions& o);

}  // namespace agentkv
