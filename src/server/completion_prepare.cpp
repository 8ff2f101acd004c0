#include "server/completion_prepare.h"

#include <algorithm>
#include <optional>
#include <random>
#include <utility>

#include "grammar/schema_check.h"
#include "server/models_handler.h"
#include "server/openai_request.h"
#include "server/tool_calls.h"
#include "sharing/scheme.h"
#include "tokenizer/tokenizer.h"

namespace agentkv::server {

namespace {

// A request on its way to Prepared: what the body's parser gave and what is
// built from it.
struct Draft {
  Prepared p;
  ServeRequest base;  // what every prompt's ServeRequest shares
  SamplingFields sf;
  GuidedFields guided;
  std::vector<std::vector<int32_t>> prompts;
};

std::optional<ApiError> read_chat(const CompletionEnv& env, const std::string& body, Draft* d) {
  const Tokenizer& tok = env.engine->tokenizer();
  ApiResult<ChatRequest> parsed = parse_chat_request(body, env.limits);
  if (!parsed.ok()) return parsed.error();
  ChatRequest& c = parsed.value();
  if (!env.chat) return bad_request("messages", env.chat_error);
  // Tools, calls and results as the template renders them, or in agentkv's
  // wording of the server's tool format for a template without tools.
  Result<MarkedText> text =
      env.template_tools
          ? env.chat->render(template_messages_json(c.messages), template_tools_json(c.guided.tools),
                             /*add_generation_prompt=*/true)
          : env.chat->render(render_tool_conversation(env.tool_format, c.messages, c.guided.tools),
                             /*add_generation_prompt=*/true);
  if (!text.is_ok()) return bad_request("messages", text.status().message());
  d->guided = std::move(c.guided);
  GuidedFields& guided = d->guided;
  if (!guided.grammar && guided.tool_choice != ToolChoice::kNone) {
    for (size_t i = 0; i < guided.tools.size(); ++i) {
      const Status st = json_schema_check_supported(guided.tools[i].parameters.dump());
      if (!st.is_ok())
        return bad_request("tools[" + std::to_string(i) + "].function.parameters", st.message());
    }
    guided.grammar = tool_call_grammar(env.tool_format, guided, env.bare_tool_calls);
    d->p.bare_call_triggers = tool_call_bare_triggers(env.tool_format, guided, env.bare_tool_calls);
    guided.grammar_field = "tools";
    d->p.tool_choice = guided.tool_choice;
    d->p.tool_format = env.tool_format;
  }
  // Control-token text in what the request wrote stays plain text.
  d->prompts.push_back(env.chat->tokenize(tok, *text));
  d->p.echo_texts.emplace_back();
  d->p.want_logprobs = c.logprobs;
  d->base.sampling.n_logprobs = c.logprobs ? c.top_logprobs : 0;
  d->base.sampling.logprob = c.logprobs;
  d->sf = std::move(c.sampling);
  return std::nullopt;
}

std::optional<ApiError> read_completion(const CompletionEnv& env, const std::string& body, Draft* d) {
  const Tokenizer& tok = env.engine->tokenizer();
  ApiResult<CompletionRequest> parsed = parse_completion_request(body, env.limits);
  if (!parsed.ok()) return parsed.error();
  CompletionRequest& c = parsed.value();
  for (PromptInput& in : c.prompts) {
    if (in.is_tokens) {
      d->p.echo_texts.push_back(c.echo ? tok.decode(in.tokens) : std::string());
      d->prompts.push_back(std::move(in.tokens));
    } else {
      // As vLLM (HF tokenizers split added tokens out of any text) and
      // llama-server: control-token text in a completion prompt is the token.
      d->prompts.push_back(tok.encode(in.text, /*add_special=*/true, /*parse_special=*/true));
      d->p.echo_texts.push_back(c.echo ? std::move(in.text) : std::string());
    }
  }
  d->p.want_logprobs = c.logprobs.has_value();
  d->base.sampling.n_logprobs = c.logprobs.value_or(0);
  d->base.sampling.logprob = c.logprobs.has_value();
  // As OpenAI: echo with logprobs scores the prompt's tokens too.
  d->p.echo_logprobs = c.echo && c.logprobs.has_value();
  if (d->p.echo_logprobs) d->base.prompt_logprobs = *c.logprobs;
  d->sf = std::move(c.sampling);
  d->guided = std::move(c.guided);
  return std::nullopt;
}

// The grammar, the model (an adapter's name or the server's), the scheme,
// the sampling parameters and the n seeds.
std::optional<ApiError> apply_fields(const CompletionEnv& env, Draft* d) {
  ServeRequest& base = d->base;
  SamplingFields& sf = d->sf;
  if (d->guided.grammar) {
    if (!env.grammars) {
      return bad_request(d->guided.grammar_field,
                         "constrained decoding is not available on this server: " + env.grammars_error);
    }
    Result<std::shared_ptr<const TokenConstraint>> g = env.grammars->get(*d->guided.grammar);
    if (!g.is_ok()) return bad_request(d->guided.grammar_field, g.status().message());
    base.constraint = std::move(g).value();
  }
  d->p.want_token_ids = sf.return_token_ids;
  ApiResult<std::string> adapter = resolve_model(*env.engine, env.model_name, sf.model);
  if (!adapter.ok()) return adapter.error();
  base.adapter = std::move(adapter).value();
  d->p.model = base.adapter.empty() ? env.model_name : base.adapter;
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
  d->p.n = sf.n;
  std::random_device rd;
  for (int j = 0; j < d->p.n; ++j) {
    d->p.seeds.push_back(sf.seed ? static_cast<uint64_t>(*sf.seed) + static_cast<uint64_t>(j)
                                 : (uint64_t{rd()} << 32) ^ rd());
  }
  // Absent: as much as the context allows (the engine clips to what is left).
  base.max_tokens = sf.max_tokens.value_or(env.engine->max_model_len());
  base.stop = std::move(sf.stop);
  base.stop_token_ids = std::move(sf.stop_token_ids);
  base.ignore_eos = sf.ignore_eos;
  base.tenant = env.tenant;
  base.cache_salt = sf.cache_salt.value_or("");
  return std::nullopt;
}

// The agent session: the body's session_id or the X-Session-ID header (they
// must agree), and its retention within the server's maximum.
std::optional<ApiError> apply_session(const CompletionEnv& env, Draft* d) {
  SamplingFields& sf = d->sf;
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
    d->base.session_id = *sf.session_id;
    d->base.session_retention_s = ttl;
  }
  return std::nullopt;
}

}  // namespace

ApiResult<Prepared> prepare_completion(const CompletionEnv& env, const std::string& body, bool chat) {
  Draft d;
  if (std::optional<ApiError> e = chat ? read_chat(env, body, &d) : read_completion(env, body, &d)) return *e;
  if (std::optional<ApiError> e = apply_fields(env, &d)) return *e;
  if (std::optional<ApiError> e = apply_session(env, &d)) return *e;
  for (std::vector<int32_t>& ids : d.prompts) {
    ServeRequest r = d.base;
    r.prompt = std::move(ids);
    d.p.prompts.push_back(std::move(r));
  }
  d.p.stream = d.sf.stream;
  d.p.include_usage = d.sf.include_usage;
  return std::move(d.p);
}

}  // namespace agentkv::server
