// `agentkv logits`: final-position logits of a token list, for reference
// comparisons (tests/python/test_logits.py), computed by the serving engine.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/generate_serving.h"
#include "tokenizer/tokenizer.h"
#include "runtime/request_hooks.h"

namespace agentkv::cli {

namespace {

struct LogitsArgs {
  EngineArgs engine;
  std::string tokens;
  std::string tokens_file;
  std::string prompt;
  std::string out;
  int top = 5;
  int decode_from = -1;
};

Status run(const LogitsArgs& a) {
  // One request alone on the serving engine: the prompt in --ubatch chunks,
  // nothing read from a cache, one token sampled from the last row.
  ServingOptions so = serving_options(a.engine);
  so.prefix_caching = false;
  so.kv_cache_tokens = int64_t{a.engine.n_ctx} + 1;  // --ctx-size counts the prompt; the engine wants
  so.max_model_len = a.engine.n_ctx + 1;             // room for the token it samples
  AKV_ASSIGN_OR_RETURN(std::unique_ptr<ServingEngine> engine, create_serving_engine(so));
  std::vector<int32_t> ids;
  if (!a.prompt.empty()) {
    ids = engine->tokenizer().encode(a.prompt, true, true);
  } else {
    std::string text = a.tokens;
    if (!a.tokens_file.empty()) {
      std::ifstream f(a.tokens_file);
      if (!f) return make_error(ErrorCode::kNotFound, "cannot read ", a.tokens_file);
      std::stringstream ss;
      ss << f.rdbuf();
      text = ss.str();
    }
    AKV_ASSIGN_OR_RETURN(ids, parse_token_list(text));
  }
  if (ids.empty())
    return make_error(ErrorCode::kInvalidArgument, "no tokens: give --tokens, --tokens-file or --prompt");
  if (static_cast<int64_t>(ids.size()) > a.engine.n_ctx) {
    return make_error(ErrorCode::kOutOfRange, ids.size(), " tokens exceed --ctx-size ", a.engine.n_ctx);
  }
  ServeRequest req;
  req.prompt = ids;
  req.max_tokens = 1;
  edit_request_hooks(req).return_logits = true;
  // --decode-from K: prefill the first K ids in one go, then the rest one
  // token per step through the KV cache, as decoding does.
  if (a.decode_from >= 0) edit_request_hooks(req).one_per_step_from = std::max(a.decode_from, 1);
  AKV_ASSIGN_OR_RETURN(ServeEvent last, serve_one(*engine, std::move(req)));
  const std::vector<float>& logits = last.logits;
  if (logits.empty()) return make_error(ErrorCode::kInternal, "the engine returned no logits");
  if (!a.out.empty()) {
    std::ofstream f(a.out, std::ios::binary);
    f.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * sizeof(float)));
    if (!f) return make_error(ErrorCode::kIo, "cannot write ", a.out);
  }
  std::vector<int32_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  const int top = std::min<int>(a.top, static_cast<int>(order.size()));
  std::partial_sort(order.begin(), order.begin() + top, order.end(),
                    [&](int32_t x, int32_t y) { return logits[x] > logits[y]; });
  std::printf("%d tokens; top %d next tokens:\n", static_cast<int>(ids.size()), top);
  for (int i = 0; i < top; ++i) {
    std::printf("  %6d %10.4f  %s\n", order[i], logits[order[i]],
                escape_piece(engine->tokenizer().token_to_piece(order[i])).c_str());
  }
  return Status::ok();
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
  cmd->callback([a] {
    if (Status st = run(*a); !st.is_ok()) fail(st);
  });
}

}  // namespace agentkv::cli
