#include <algorithm>
#include <cmath>
#include <random>

#include "workloads/ruler_tasks.h"
#include "workloads/task_text.h"
#include "workloads/task_words.h"

namespace agentkv {

namespace {

constexpr size_t kVocab = 200;      // coded words; rare ranks get no occurrence
constexpr size_t kWordLen = 6;      // letters per coded word, as in RULER
constexpr int32_t kPieceSlack = 8;  // see task_split_pieces: more than one word's tokens

// RULER's counts: floor(n * k^-alpha / zeta(alpha)) for rank k = 1..kVocab.
std::vector<int64_t> zipf_counts(int64_t n, double alpha, double zeta) {
  std::vector<int64_t> c(kVocab);
  for (size_t k = 1; k <= kVocab; ++k)
    c[k - 1] = static_cast<int64_t>(double(n) * std::pow(double(k), -alpha) / zeta);
  return c;
}

}  // namespace

Result<std::vector<FidelityTask>> make_fwe_tasks(const Tokenizer& tok, const FidelityTaskOptions& o) {
  if (!(o.zipf_alpha > 1.0) || o.zipf_alpha > 10)
    return make_error(ErrorCode::kInvalidArgument, "fwe: need 1 < zipf_alpha <= 10");
  const int64_t budget = int64_t{o.n_docs} * (o.doc_tokens - kPieceSlack);
  double zeta = 0;  // of alpha, to 1e-5 or better for alpha >= 1.1
  for (size_t k = 1; k <= 100000; ++k) zeta += std::pow(double(k), -o.zipf_alpha);
  std::mt19937_64 rng(o.seed);
  std::vector<FidelityTask> tasks;
  for (int32_t i = 0; i < o.n_prompts; ++i) {
    FidelityTask t;
    t.kind = "fwe";
    t.head =
        task_chat_head(tok,
                       "Read the following coded text and track the frequency of each coded word. Find the "
                       "three most frequently appeared coded words.");
    t.cache_head = task_cache_head(tok);
    std::vector<std::string> vocab = task_coded_words(rng, kVocab, kWordLen);
    vocab[0] = "....";  // the top rank is noise, as in RULER
    std::vector<std::vector<int32_t>> ids;
    for (const std::string& w : vocab) ids.push_back(tok.encode(" " + w, false, false));
    // The most words (in steps of 10, as RULER grows them) whose text fits.
    auto tokens_of = [&](const std::vector<int64_t>& c) {
      int64_t s = 0;
      for (size_t k = 0; k < kVocab; ++k) s += c[k] * static_cast<int64_t>(ids[k].size());
      return s;
    };
    int64_t n = 10;
    while (tokens_of(zipf_counts(n + 10, o.zipf_alpha, zeta)) <= budget) n += 10;
    const std::vector<int64_t> counts = zipf_counts(n, o.zipf_alpha, zeta);
    if (tokens_of(counts) > budget || counts[3] <= counts[4]) {
      return make_error(ErrorCode::kInvalidArgument, "fwe: ", o.n_docs, " documents of ", o.doc_tokens,
                        " tokens are too few to rank three words");
    }
    std::vector<size_t> text;
    for (size_t k = 0; k < kVocab; ++k) text.insert(text.end(), static_cast<size_t>(counts[k]), k);
    std::shuffle(text.begin(), text.end(), rng);
    std::vector<std::vector<int32_t>> pieces;
    for (size_t k : text) pieces.push_back(ids[k]);
    t.docs = task_split_pieces(pieces, o.n_docs);
    t.answers = {vocab[1], vocab[2], vocab[3]};
    t.tail = task_chat_tail(
        tok, rng,
        "Question: Do not provide any explanation. Please ignore the dots '....'. What are the "
        "three most frequently appeared words in the above coded text?",
        "Answer: According to the coded text above, the three most frequently appeared words are:",
        o.question_tokens);
    t.cache_order = task_shuffled_order(o.n_docs, rng);
    tasks.push_back(std::move(t));
  }
  return tasks;
}

}  // namespace agentkv
