// `agentkv generate`: a prompt or a chat message in, streamed text out. With
// --adapter it runs on the serving engine (see generate_serving.h).
#include <cstdio>
#include <optional>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/generate_serving.h"
#include "model/model_spec.h"
#include "server/serve_config.h"
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
  std::string adapter;     // NAME=PATH[:kind]
  std::string kv_sharing;  // with adapter: the request's scheme
  bool base_first = false;
};

Result<std::vector<int32_t>> build_prompt(const Tokenizer& tok, const GenerateArgs& a) {
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

// --adapter: the serving engine with that one adapter registered.
Status run_serving(const GenerateArgs& a) {
  AKV_ASSIGN_OR_RETURN(ServingOptions::AdapterSpec spec, server::parse_adapter_spec(a.adapter));
  AKV_RETURN_IF_ERROR(server::check_adapter_specs({spec}, ""));
  if (!a.kv_sharing.empty()) AKV_RETURN_IF_ERROR(server::check_kv_sharing(a.kv_sharing));
  ServingOptions so;
  so.model_path = a.engine.model_path;
  so.n_threads = a.engine.n_threads;
  so.block_size = a.engine.block_size;
  so.max_model_len = a.engine.n_ctx;
  so.max_batch_tokens = a.engine.ubatch;
  so.adapters = {spec};
  AKV_ASSIGN_OR_RETURN(std::unique_ptr<ServingEngine> engine, create_serving_engine(so));
  AKV_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, build_prompt(engine->tokenizer(), a));
  ServingGenerateOptions o;
  o.adapter = spec.name;
  o.kv_sharing = a.kv_sharing;
  o.base_first = a.base_first;
  o.sampling = a.sampling;
  o.gen = a.gen;
  AKV_ASSIGN_OR_RETURN(ServingGenerateResult r, generate_serving(*engine, prompt, o, [](const std::string& piece) {
                         std::fwrite(piece.data(), 1, piece.size(), stdout);
                         std::fflush(stdout);
                       }));
  std::fputc('\n', stdout);
  std::fflush(stdout);  // before the stats on stderr
  if (a.sampling.n_logprobs > 0) print_logprobs(engine->tokenizer(), r.samples);
  if (a.stats) {
    std::fprintf(stderr,
                 "adapter %s, kv-sharing %s%s | prompt: %d tokens, %d from the cache | generated: %d tokens | "
                 "ttft %.3f s, total %.3f s | finish: %s\n",
                 spec.name.c_str(), a.kv_sharing.empty() ? "none" : a.kv_sharing.c_str(),
                 a.base_first ? " (base first)" : "", r.prompt_tokens, r.cached_tokens, r.completion_tokens,
                 r.ttft_s, r.total_s, r.finish.c_str());
  }
  engine->drain(5);
  return Status::ok();
}

void run(const GenerateArgs& a) {
  if (a.prompt.empty() == a.chat.empty()) {
    return fail(make_error(ErrorCode::kInvalidArgument, "give exactly one of --prompt or --chat"));
  }
  if (!a.adapter.empty()) {
    if (Status st = run_serving(a); !st.is_ok()) fail(st);
    return;
  }
  if (!a.kv_sharing.empty() || a.base_first) {
    return fail(make_error(ErrorCode::kInvalidArgument, "--kv-sharing and --base-first go with --adapter"));
  }
  auto eng = Engine::create(a.engine);
  if (!eng.is_ok()) return fail(eng.status());
  auto prompt = build_prompt((*eng)->tokenizer(), a);
  if (!prompt.is_ok()) return fail(prompt.status());
  auto res = (*eng)->generate(*prompt, a.sampling, a.gen, [](const std::string& piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  });
  if (!res.is_ok()) return fail(res.status());
  std::fputc('\n', stdout);
  if (a.sampling.n_logprobs > 0) print_logprobs((*eng)->tokenizer(), res->samples);
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
  cmd->add_option("--adapter", a->adapter,
                  "NAME=PATH[:lora|:alora|:icarus]: generate with this adapter (PEFT directory or GGUF LoRA), "
                  "on the serving engine")
      ->type_name("NAME=PATH[:KIND]");
  cmd->add_option("--kv-sharing", a->kv_sharing,
                  "with --adapter: the request's KV-sharing scheme (none, alora, icarus)")
      ->check(CLI::IsMember({"none", "alora", "icarus"}));
  cmd->add_flag("--base-first", a->base_first,
                "with --adapter: run the prompt on the base model first, so the adapter can reuse its KV as "
                "--kv-sharing allows (--stats shows the cached prompt tokens)");
  cmd->callback([a] { run(*a); });
}

}  // namespace agentkv::cli
