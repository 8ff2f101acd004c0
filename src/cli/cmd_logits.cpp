// `agentkv logits`: final-position logits of a token list, for reference
// comparisons (tests/python/test_logits.py).
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "model/model_spec.h"
#include "runtime/sequence.h"
#include "tokenizer/tokenizer.h"

namespace agentkv::cli {

namespace {

struct LogitsArgs {
  EngineOptions engine;
  std::string tokens;
  std::string tokens_file;
  std::string prompt;
  std::string out;
  int top = 5;
  int decode_from = -1;
};

void run(const LogitsArgs& a) {
  auto eng = Engine::create(a.engine);
  if (!eng.is_ok()) return fail(eng.status());
  std::vector<int32_t> ids;
  if (!a.prompt.empty()) {
    ids = (*eng)->tokenizer().encode(a.prompt, true, true);
  } else {
    std::string text = a.tokens;
    if (!a.tokens_file.empty()) {
      std::ifstream f(a.tokens_file);
      if (!f) return fail(make_error(ErrorCode::kNotFound, "cannot read ", a.tokens_file));
      std::stringstream ss;
      ss << f.rdbuf();
      text = ss.str();
    }
    auto parsed = parse_token_list(text);
    if (!parsed.is_ok()) return fail(parsed.status());
    ids = std::move(parsed).value();
  }
  if (ids.empty()) return fail(make_error(ErrorCode::kInvalidArgument, "no tokens: give --tokens, --tokens-file or --prompt"));
  auto seq = (*eng)->new_sequence();
  std::vector<float> logits;
  // --decode-from K: prefill the first K ids in one go, then the rest one
  // token per step through the KV cache, as decoding does.
  const size_t split = a.decode_from < 0 ? ids.size() : std::min<size_t>(std::max(a.decode_from, 1), ids.size());
  if (Status st = seq->append({ids.data(), split}, &logits); !st.is_ok()) return fail(st);
  for (size_t i = split; i < ids.size(); ++i) {
    if (Status st = seq->append({&ids[i], 1}, &logits); !st.is_ok()) return fail(st);
  }
  if (!a.out.empty()) {
    std::ofstream f(a.out, std::ios::binary);
    f.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * sizeof(float)));
    if (!f) return fail(make_error(ErrorCode::kIo, "cannot write ", a.out));
  }
  std::vector<int32_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  const int top = std::min<int>(a.top, static_cast<int>(order.size()));
  std::partial_sort(order.begin(), order.begin() + top, order.end(),
                    [&](int32_t x, int32_t y) { return logits[x] > logits[y]; });
  std::printf("%d tokens; top %d next tokens:\n", static_cast<int>(ids.size()), top);
  for (int i = 0; i < top; ++i) {
    std::printf("  %6d %10.4f  %s\n", order[i], logits[order[i]],
                escape_piece((*eng)->tokenizer().token_to_piece(order[i])).c_str());
  }
}

}  // namespace

void register_logits(CLI::App& app) {
  auto a = std::make_shared<LogitsArgs>();
  CLI::App* cmd = app.add_subcommand("logits", "Print (and optionally save) the final-position logits of a token list");
  add_engine_options(cmd, &a->engine);
  cmd->add_option("--tokens", a->tokens, "comma-separated token ids");
  cmd->add_option("--tokens-file", a->tokens_file, "file of token ids separated by commas or whitespace");
  cmd->add_option("-p,--prompt", a->prompt, "text to tokenize (special tokens parsed) instead of ids");
  cmd->add_option("-o,--out", a->out, "write the logits as raw little-endian float32 (n_vocab values)");
  cmd->add_option("--top", a->top, "how many top tokens to print")->capture_default_str();
  cmd->add_option("--decode-from", a->decode_from,
                  "prefill the first K ids, then feed the rest one token per step (exercises the KV cache)");
  cmd->callback([a] { run(*a); });
}

}  // namespace agentkv::cli
