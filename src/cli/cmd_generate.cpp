// `agentkv generate`: a prompt or a chat message in, streamed text out.
#include <cstdio>
#include <optional>

#include "cli/commands.h"
#include "cli/common.h"
#include "model/model_spec.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace agentkv::cli {

namespace {

struct GenerateArgs {
  EngineOptions engine;
  std::string prompt;
  std::string chat;
  std::string system;
  std::string chat_template;
  SamplingParams sampling;
  GenerateOptions gen;
  bool stats = false;
};

Result<std::vector<int32_t>> build_prompt(const Engine& eng, const GenerateArgs& a) {
  const Tokenizer& tok = eng.tokenizer();
  if (!a.chat.empty()) {
    ChatTemplateKind kind;
    if (!a.chat_template.empty()) {
      AKV_ASSIGN_OR_RETURN(kind, chat_template_from_name(a.chat_template));
    } else {
      AKV_ASSIGN_OR_RETURN(kind, chat_template_detect(tok.vocab().chat_template));
    }
    std::vector<ChatMessage> msgs;
    if (!a.system.empty()) msgs.push_back({"system", a.system});
    msgs.push_back({"user", a.chat});
    std::string text = chat_template_apply(kind, msgs, /*add_generation_prompt=*/true);
    return tok.encode(text, /*add_special=*/true, /*parse_special=*/true);
  }
  return tok.encode(a.prompt, /*add_special=*/true, /*parse_special=*/false);
}

void print_logprobs(const Engine& eng, const GenerateResult& r) {
  const Tokenizer& tok = eng.tokenizer();
  std::fprintf(stderr, "\n%-6s %-20s %10s   top\n", "step", "token", "logprob");
  for (size_t i = 0; i < r.samples.size(); ++i) {
    const SampleResult& s = r.samples[i];
    std::fprintf(stderr, "%-6zu %-20s %10.4f  ", i, escape_piece(tok.token_to_piece(s.id)).c_str(), s.logprob);
    for (const auto& t : s.top) {
      std::fprintf(stderr, " %s(%.3f)", escape_piece(tok.token_to_piece(t.id)).c_str(), t.logprob);
    }
    std::fprintf(stderr, "\n");
  }
}

void run(const GenerateArgs& a) {
  if (a.prompt.empty() == a.chat.empty()) {
    return fail(make_error(ErrorCode::kInvalidArgument, "give exactly one of --prompt or --chat"));
  }
  auto eng = Engine::create(a.engine);
  if (!eng.is_ok()) return fail(eng.status());
  auto prompt = build_prompt(**eng, a);
  if (!prompt.is_ok()) return fail(prompt.status());
  auto res = (*eng)->generate(*prompt, a.sampling, a.gen, [](const std::string& piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  });
  if (!res.is_ok()) return fail(res.status());
  std::fputc('\n', stdout);
  if (a.sampling.n_logprobs > 0) print_logprobs(**eng, *res);
  if (a.stats) {
    const auto& r = *res;
    std::fprintf(stderr, "prompt: %d tokens, %.1f tok/s | generated: %zu tokens, %.1f tok/s | finish: %s\n",
                 r.prompt_tokens, r.prompt_tokens / std::max(r.prefill_s, 1e-9), r.tokens.size(),
                 r.tokens.size() / std::max(r.decode_s, 1e-9), r.finish == FinishReason::kStop ? "stop" : "length");
  }
}

}  // namespace

void register_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt or a chat message, streamed to stdout");
  add_engine_options(cmd, &a->engine);
  cmd->add_option("-p,--prompt", a->prompt, "raw prompt text (no chat template)");
  cmd->add_option("--chat", a->chat, "a user message, formatted with the model's chat template");
  cmd->add_option("--system", a->system, "system message for --chat");
  cmd->add_option("--chat-template", a->chat_template, "chatml, llama3 or mistral (default: from the model file)");
  cmd->add_option("-n,--max-tokens", a->gen.max_tokens, "tokens to generate at most")->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--temp,--temperature", a->sampling.temperature, "sampling temperature; 0 = greedy")
      ->capture_default_str();
  cmd->add_option("--top-k", a->sampling.top_k, "keep the k most likely tokens; 0 = off")->capture_default_str();
  cmd->add_option("--top-p", a->sampling.top_p, "nucleus sampling mass; 1 = off")->capture_default_str();
  cmd->add_option("--min-p", a->sampling.min_p, "drop tokens below min_p * p(max); 0 = off")->capture_default_str();
  cmd->add_option("-s,--seed", a->sampling.seed, "random seed")->capture_default_str();
  cmd->add_option("--stop", a->gen.stop, "stop string (repeatable); not printed");
  cmd->add_option("--logprobs", a->sampling.n_logprobs, "print the chosen token's logprob and the top N (0-20)")
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", a->gen.ignore_eos, "keep generating past end-of-generation tokens");
  cmd->add_flag("--stats", a->stats, "print token counts and speeds to stderr");
  cmd->callback([a] { run(*a); });
}

}  // namespace agentkv::cli
