// `agentkv generate`: a prompt or a chat message in, streamed text out, on the
// serving engine (see generate_serving.h), optionally with an adapter.
#include <algorithm>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/generate_serving.h"
#include "model/model_spec.h"
#include "server/serve_config.h"
#include "sharing/scheme.h"
#include "tokenizer/chat_renderer.h"
#include "tokenizer/tokenizer.h"

namespace agentkv::cli {

namespace {

struct GenerateArgs {
  EngineArgs engine;
  std::string prompt;
  std::string chat;
  std::string system;
  std::string chat_template;
  ServingGenerateOptions gen;  // its adapter name comes from `adapter`
  bool stats = false;
  std::string adapter;  // NAME=PATH[:kind]
};

Result<std::vector<int32_t>> build_prompt(const Tokenizer& tok, const GenerateArgs& a) {
  if (!a.chat.empty()) {
    AKV_ASSIGN_OR_RETURN(ChatRenderer chat, ChatRenderer::create(tok, a.chat_template));
    std::fprintf(stderr, "agentkv: chat template: %s\n", chat.description().c_str());
    std::vector<ChatMessage> msgs;
    if (!a.system.empty()) msgs.push_back({"system", a.system});
    msgs.push_back({"user", a.chat});
    AKV_ASSIGN_OR_RETURN(MarkedText text, chat.render(msgs, /*add_generation_prompt=*/true));
    return chat.tokenize(tok, text);
  }
  return tok.encode(a.prompt, /*add_special=*/true, /*parse_special=*/false);
}

void print_logprobs(const Tokenizer& tok, const std::vector<SampleResult>& samples) {
  std::fprintf(stderr, "\n%-6s %-20s %10s   top\n", "step", "token", "logprob");
  for (size_t i = 0; i < samples.size(); ++i) {
    const SampleResult& s = samples[i];
    std::fprintf(stderr, "%-6zu %-20s %10.4f  ", i, escape_piece(tok.token_to_piece(s.id)).c_str(), s.logprob);
    for (const auto& t : s.top) {
      std::fprintf(stderr, " %s(%.3f)", escape_piece(tok.token_to_piece(t.id)).c_str(), t.logprob);
    }
    std::fprintf(stderr, "\n");
  }
}

Status run(const GenerateArgs& a) {
  if (a.prompt.empty() == a.chat.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "give exactly one of --prompt or --chat");
  }
  ServingOptions so = serving_options(a.engine);
  ServingGenerateOptions o = a.gen;
  o.sampling.logprob = o.sampling.n_logprobs > 0;  // printed only with --logprobs
  if (!a.adapter.empty()) {
    AKV_ASSIGN_OR_RETURN(ServingOptions::AdapterSpec spec, server::parse_adapter_spec(a.adapter));
    AKV_RETURN_IF_ERROR(server::check_adapter_specs({spec}, ""));
    if (!o.kv_sharing.empty()) AKV_RETURN_IF_ERROR(server::check_kv_sharing(o.kv_sharing));
    so.adapters = {spec};
    o.adapter = spec.name;
  } else if (!o.kv_sharing.empty() || o.base_first) {
    return make_error(ErrorCode::kInvalidArgument, "--kv-sharing and --base-first go with --adapter");
  }
  AKV_ASSIGN_OR_RETURN(std::unique_ptr<ServingEngine> engine, create_serving_engine(so));
  AKV_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, build_prompt(engine->tokenizer(), a));
  AKV_ASSIGN_OR_RETURN(ServingGenerateResult r, generate_serving(*engine, prompt, o, [](const std::string& piece) {
                         std::fwrite(piece.data(), 1, piece.size(), stdout);
                         std::fflush(stdout);
                       }));
  std::fputc('\n', stdout);
  std::fflush(stdout);  // before the stats on stderr
  if (o.sampling.n_logprobs > 0) print_logprobs(engine->tokenizer(), r.samples);
  if (a.stats) {
    // Prefill speed over the prompt tokens computed (not cached) up to the
    // first token; decode speed over the tokens after it.
    const double decode_s = std::max(r.total_s - r.ttft_s, 1e-9);
    const std::string who = o.adapter.empty() ? ""
                                              : "adapter " + o.adapter + ", kv-sharing " +
                                                    (o.kv_sharing.empty() ? "none" : o.kv_sharing) +
                                                    (o.base_first ? " (base first)" : "") + " | ";
    std::fprintf(stderr,
                 "%sprompt: %d tokens, %d from the cache, %.1f tok/s | generated: %d tokens, %.1f tok/s | "
                 "ttft %.3f s, total %.3f s | finish: %s\n",
                 who.c_str(), r.prompt_tokens, r.cached_tokens,
                 (r.prompt_tokens - r.cached_tokens) / std::max(r.ttft_s, 1e-9), r.completion_tokens,
                 std::max(0, r.completion_tokens - 1) / decode_s, r.ttft_s, r.total_s, r.finish.c_str());
  }
  engine->drain(5);
  return Status::ok();
}

}  // namespace

void register_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt or a chat message, streamed to stdout");
  add_engine_options(cmd, &a->engine);
  cmd->add_option("-p,--prompt", a->prompt, "raw prompt text (no chat template)");
  cmd->add_option("--chat", a->chat, "a user message, formatted with the model's chat template");
  cmd->add_option("--system", a->system, "system message for --chat");
  cmd->add_option("--chat-template", a->chat_template, "the model file's own Jinja template by default (a built-in chatml when it has none); chatml, "
                  "llama3 or mistral for a built-in; or the path of a .jinja file");
  cmd->add_option("-n,--max-tokens", a->gen.max_tokens, "tokens to generate at most")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--temp,--temperature", a->gen.sampling.temperature, "sampling temperature; 0 = greedy")
      ->capture_default_str();
  cmd->add_option("--top-k", a->gen.sampling.top_k, "keep the k most likely tokens; 0 = off")
      ->capture_default_str();
  cmd->add_option("--top-p", a->gen.sampling.top_p, "nucleus sampling mass; 1 = off")->capture_default_str();
  cmd->add_option("--min-p", a->gen.sampling.min_p, "drop tokens below min_p * p(max); 0 = off")
      ->capture_default_str();
  cmd->add_option("-s,--seed", a->gen.sampling.seed, "random seed")->capture_default_str();
  cmd->add_option("--stop", a->gen.stop, "stop string (repeatable); not printed");
  cmd->add_option("--logprobs", a->gen.sampling.n_logprobs,
                  "print the chosen token's logprob and the top N (0-20)")
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", a->gen.ignore_eos, "keep generating past end-of-generation tokens");
  cmd->add_flag("--stats", a->stats, "print token counts and speeds to stderr");
  cmd->add_option("--adapter", a->adapter,
                  "NAME=PATH[:lora|:alora|:icarus]: generate with this adapter (PEFT directory or GGUF LoRA), "
                  "on the serving engine")
      ->type_name("NAME=PATH[:KIND]");
  cmd->add_option("--kv-sharing", a->gen.kv_sharing,
                  "with --adapter: the request's KV-sharing scheme, one of: " + sharing_scheme_list())
      ->check(kv_sharing_validator());
  cmd->add_flag("--base-first", a->gen.base_first,
                "with --adapter: run the prompt on the base model first, so the adapter can reuse its KV as "
                "--kv-sharing allows (--stats shows the cached prompt tokens)");
  cmd->callback([a] {
    if (Status st = run(*a); !st.is_ok()) fail(st);
  });
}

}  // namespace agentkv::cli
