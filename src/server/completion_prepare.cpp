#include "server/completion_prepare.h"

#include <algorithm>
#include <random>
#include <utility>

#include "server/models_handler.h"
#include "sharing/scheme.h"
#include "server/openai_request.h"
#include "server/tool_calls.h"
#include "grammar/schema_check.h"
#include "tokenizer/tokenizer.h"

namespace agentkv::server {

ApiResult<Prepared> prepare_completion(const CompletionEnv& env, const std::string& body, bool chat) {
  const Tokenizer& tok = env.engine->tokenizer();
  Prepared p;
  ServeRequest base;
  SamplingFields sf;
  GuidedFields guided;
  std::vector<std::vector<int32_t>> prompts;
  if (chat) {
    ApiResult<ChatRequest> parsed = parse_chat_request(body, env.limits);
    if (!parsed.ok()) return parsed.error();
    ChatRequest& c = parsed.value();
    if (!env.chat_kind) return bad_request("messages", env.chat_kind_error);
    // Tools, calls and results in the server's tool format; OpenAI's
    // "developer" role is the newer name of "system".
    const std::vector<agentkv::ChatMessage> msgs =
        render_tool_conversation(env.tool_format, c.messages, c.guided.tools);
    guided = std::move(c.guided);
    if (!guided.grammar && guided.tool_choice != ToolChoice::kNone) {
      for (size_t i = 0; i < guided.tools.size(); ++i) {
        const Status st = json_schema_check_supported(guided.tools[i].parameters.dump());
        if (!st.is_ok()) return bad_request("tools[" + std::to_string(i) + "].function.parameters", st.message());
      }
      guided.grammar = tool_call_grammar(env.tool_format, guided);
      guided.grammar_field = "tools";
      p.tool_choice = guided.tool_choice;
      p.tool_format = env.tool_format;
    }
    const std::string text = chat_template_apply(*env.chat_kind, msgs, /*add_generation_prompt=*/true);
    prompts.push_back(tok.encode(text, /*add_special=*/true, /*parse_special=*/true));
    p.echo_texts.emplace_back();
    p.want_logprobs = c.logprobs;
    base.sampling.n_logprobs = c.logprobs ? c.top_logprobs : 0;
    base.sampling.logprob = c.logprobs;
    sf = std::move(c.sampling);
  } else {
    ApiResult<CompletionRequest> parsed = parse_completion_request(body, env.limits);
    if (!parsed.ok()) return parsed.error();
    CompletionRequest& c = parsed.value();
    for (PromptInput& in : c.prompts) {
      if (in.is_tokens) {
        p.echo_texts.push_back(c.echo ? tok.decode(in.tokens) : std::string());
        prompts.push_back(std::move(in.tokens));
      } else {
        // As vLLM (HF tokenizers split added tokens out of any text) and
        // llama-server: control-token text in a completion prompt is the token.
        prompts.push_back(tok.encode(in.text, /*add_special=*/true, /*parse_special=*/true));
        p.echo_texts.push_back(c.echo ? std::move(in.text) : std::string());
      }
    }
    p.want_logprobs = c.logprobs.has_value();
    base.sampling.n_logprobs = c.logprobs.value_or(0);
    base.sampling.logprob = c.logprobs.has_value();
    // As OpenAI: echo with logprobs scores the prompt's tokens too.
    p.echo_logprobs = c.echo && c.logprobs.has_value();
    if (p.echo_logprobs) base.prompt_logprobs = *c.logprobs;
    sf = std::move(c.sampling);
    guided = std::move(c.guided);
  }
  if (guided.grammar) {
    if (!env.grammars) {
      return bad_request(guided.grammar_field, "constrained decoding is not available on this server: " + env.grammars_error);
    }
    Result<std::shared_ptr<const TokenConstraint>> g = env.grammars->get(*guided.grammar);
    if (!g.is_ok()) return bad_request(guided.grammar_field, g.status().message());
    base.constraint = std::move(g).value();
  }
  p.want_token_ids = sf.return_token_ids;
  ApiResult<std::string> adapter = resolve_model(*env.engine, env.model_name, sf.model);
  if (!adapter.ok()) return adapter.error();
  base.adapter = std::move(adapter).value();
  p.model = base.adapter.empty() ? env.model_name : base.adapter;
  if (sf.kv_sharing) {
    if (const std::string why = kv_sharing_error(*sf.kv_sharing); !why.empty())
      return bad_request("kv_sharing", why);
    base.kv_sharing = *sf.kv_sharing;
    base.kv_sharing_params = sf.kv_sharing_params;
  }
  SamplingParams& sp = base.sampling;
  sp.temperature = sf.temperature;
  sp.top_p = sf.top_p;
  sp.top_k = sf.top_k;
  sp.min_p = sf.min_p;
  sp.repetition_penalty = sf.repetition_penalty;
  sp.frequency_penalty = sf.frequency_penalty;
  sp.presence_penalty = sf.presence_penalty;
  sp.logit_bias = std::move(sf.logit_bias);
  p.n = sf.n;
  std::random_device rd;
  for (int j = 0; j < p.n; ++j) {
    p.seeds.push_back(sf.seed ? static_cast<uint64_t>(*sf.seed) + static_cast<uint64_t>(j)
                              : (uint64_t{rd()} << 32) ^ rd());
  }
  // Absent: as much as the context allows (the engine clips to what is left).
  base.max_tokens = sf.max_tokens.value_or(env.engine->max_model_len());
  base.stop = std::move(sf.stop);
  base.stop_token_ids = std::move(sf.stop_token_ids);
  base.ignore_eos = sf.ignore_eos;
  base.tenant = env.tenant;
  if (!env.session_header.empty()) {
    if (!valid_session_id(env.session_header)) {
      return bad_request("X-Session-ID", "X-Session-ID must be 1-128 of [A-Za-z0-9._:-]");
    }
    if (sf.session_id && *sf.session_id != env.session_header) {
      return bad_request("session_id", "session_id and the X-Session-ID header differ");
    }
    sf.session_id = env.session_header;
  }
  if (sf.session_retention_s && !sf.session_id) {
    return bad_request("session_retention_s", "session_retention_s needs a session_id (or X-Session-ID)");
  }
  if (sf.session_id) {
    const double ttl = sf.session_retention_s.value_or(std::min(env.session_retention_s, env.session_max_retention_s));
    if (ttl > env.session_max_retention_s) {
      return bad_request("session_retention_s", "session_retention_s is at most " +
                                                    std::to_string(static_cast<int64_t>(env.session_max_retention_s)) +
                                                    " on this server (--session-max-retention-s)");
    }
    base.session_id = *sf.session_id;
    base.session_retention_s = ttl;
  }
  base.cache_salt = sf.cache_salt.value_or("");
  for (std::vector<int32_t>& ids : prompts) {
    ServeRequest r = base;
    r.prompt = std::move(ids);
    p.prompts.push_back(std::move(r));
  }
  p.stream = sf.stream;
  p.include_usage = sf.include_usage;
  return p;
}

}  // namespace agentkv::server
