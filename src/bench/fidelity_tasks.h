// The tasks of `agentkv bench-fidelity`: multi-document passkey retrieval
// prompts, generated from a seed (nothing downloaded). Each prompt is a chat
// turn holding n documents of filler sentences; one of them hides a five-
// digit pass key, at a varied document position; the question asks for it.
// Every piece is tokenized on its own, so a document's token ids are the
// same in the prompt that caches it and in the prompt that reuses it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace agentkv {

struct FidelityTaskOptions {
  int32_t n_prompts = 50;
  int32_t n_docs = 4;
  int32_t doc_tokens = 80;        // each document is cut to exactly this many tokens
  int32_t question_tokens = 0;    // > 0: filler before the question up to this many tokens
  uint64_t seed = 1;
};

struct FidelityTask {
  std::vector<int32_t> head;                   // chat header: "<|im_start|>user\n" ...
  // What the bench puts before a document when it caches it alone: another
  // preamble, so no document of the prompt is an exact prefix hit (each is
  // found as a segment, as in RAG where chunks are cached on their own).
  std::vector<int32_t> cache_head;
  std::vector<std::vector<int32_t>> docs;      // in prompt order
  std::vector<int32_t> tail;                   // question, end of turn, assistant header + answer prefix
  int32_t answer_doc = 0;                      // the document holding the key
  std::string passkey;                         // five digits
  // The order in which the bench caches the documents before the prompt
  // (each alone, behind the chat header): a permutation of 0..n_docs-1.
  std::vector<int32_t> cache_order;

  std::vector<int32_t> prompt() const;
};

std::vector<FidelityTask> make_fidelity_tasks(const Tokenizer& tok, const FidelityTaskOptions& o);

}  // namespace agentkv
