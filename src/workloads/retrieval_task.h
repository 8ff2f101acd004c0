// bench-fidelity's `retrieval` task: the multi-document retrieval a user
// tries first. Filler documents, each cached alone; one of them says
// "NAME's ATTRIBUTE is NUMBER." and the chat question asks for that
// attribute of that person. Unlike `passkey`, SmolLM2-135M with full
// recomputation answers it nearly always (docs/benchmarks.md, "Segment
// reuse on a retrieval task the model solves"), so accuracy can judge a
// scheme's defaults.
#pragma once

#include <vector>

#include "workloads/fidelity_tasks.h"

namespace agentkv {

std::vector<FidelityTask> make_retrieval_tasks(const Tokenizer& tok, const FidelityTaskOptions& o);

}  // namespace agentkv
