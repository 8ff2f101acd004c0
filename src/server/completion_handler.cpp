#include "server/completion_handler.h"

#include <httplib.h>

#include <chrono>
#include <ctime>
#include <memory>
#include <random>
#include <utility>

#include "server/event_queue.h"
#include "server/http_server.h"
#include "server/models_handler.h"
#include "server/openai_response.h"
#include "tokenizer/tokenizer.h"

namespace agentkv::server {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr auto kPollInterval = std::chrono::milliseconds(100);

// The request in the engine's terms, plus what the response needs.
struct Prepared {
  ServeRequest req;
  bool stream = false;
  bool include_usage = false;
  bool want_logprobs = false;
  std::string echo_text;  // completions with echo: the prompt, put before the answer
  std::string model;      // the name the response carries: the base's or the adapter's
};

ApiResult<Prepared> prepare(const CompletionEnv& env, const std::string& body, bool chat) {
  const Tokenizer& tok = env.engine->tokenizer();
  Prepared p;
  SamplingFields sf;
  if (chat) {
    ApiResult<ChatRequest> parsed = parse_chat_request(body, env.limits);
    if (!parsed.ok()) return parsed.error();
    ChatRequest& c = parsed.value();
    if (!env.chat_kind) return bad_request("messages", env.chat_kind_error);
    std::vector<agentkv::ChatMessage> msgs;
    msgs.reserve(c.messages.size());
    for (const ChatMessage& m : c.messages) {
      // OpenAI's "developer" role is the newer name of "system".
      msgs.push_back({m.role == "developer" ? "system" : m.role, m.content});
    }
    const std::string text = chat_template_apply(*env.chat_kind, msgs, /*add_generation_prompt=*/true);
    p.req.prompt = tok.encode(text, /*add_special=*/true, /*parse_special=*/true);
    p.want_logprobs = c.logprobs;
    p.req.sampling.n_logprobs = c.logprobs ? c.top_logprobs : 0;
    sf = std::move(c.sampling);
  } else {
    ApiResult<CompletionRequest> parsed = parse_completion_request(body, env.limits);
    if (!parsed.ok()) return parsed.error();
    CompletionRequest& c = parsed.value();
    if (c.prompt_is_tokens) {
      p.req.prompt = std::move(c.prompt_tokens);
      if (c.echo) p.echo_text = tok.decode(p.req.prompt);
    } else {
      // As vLLM (HF tokenizers split added tokens out of any text) and
      // llama-server: control-token text in a completion prompt is the token.
      p.req.prompt = tok.encode(c.prompt_text, /*add_special=*/true, /*parse_special=*/true);
      if (c.echo) p.echo_text = c.prompt_text;
    }
    p.want_logprobs = c.logprobs.has_value();
    p.req.sampling.n_logprobs = c.logprobs.value_or(0);
    sf = std::move(c.sampling);
  }
  ApiResult<std::string> adapter = resolve_model(*env.engine, env.model_name, sf.model);
  if (!adapter.ok()) return adapter.error();
  p.req.adapter = std::move(adapter).value();
  p.model = p.req.adapter.empty() ? env.model_name : p.req.adapter;
  if (sf.kv_sharing) {
    if (!is_kv_sharing_scheme(*sf.kv_sharing)) {
      return bad_request("kv_sharing",
                         "unknown kv_sharing '" + *sf.kv_sharing + "'; expected none, alora or icarus");
    }
    p.req.kv_sharing = *sf.kv_sharing;
  }
  p.req.sampling.temperature = sf.temperature;
  p.req.sampling.top_p = sf.top_p;
  p.req.sampling.seed = sf.seed ? static_cast<uint64_t>(*sf.seed)
                                : (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  // Absent: as much as the context allows (the engine clips to what is left).
  p.req.max_tokens = sf.max_tokens.value_or(env.engine->max_model_len());
  p.req.stop = std::move(sf.stop);
  p.req.tenant = env.tenant;
  p.req.cache_salt = sf.cache_salt.value_or("");
  p.stream = sf.stream;
  p.include_usage = sf.include_usage;
  return p;
}

std::vector<TokenLogprob> to_logprobs(const Tokenizer& tok, const std::vector<SampleResult>& samples) {
  std::vector<TokenLogprob> out;
  out.reserve(samples.size());
  for (const SampleResult& s : samples) {
    TokenLogprob t{tok.token_to_piece(s.id), s.logprob, {}};
    for (const auto& a : s.top) t.top.push_back({tok.token_to_piece(a.id), a.logprob});
    out.push_back(std::move(t));
  }
  return out;
}

// Turns event arrival times into the latency histograms.
class LatencyRecorder {
 public:
  explicit LatencyRecorder(ServerMetrics* m) : m_(m) {}

  void on_event(const TimedEvent& te) {
    const ServeEvent& e = te.event;
    const std::size_t n = e.samples.size();
    if (n > 0) {
      if (!have_first_) {
        have_first_ = true;
        first_ = te.arrived;
        m_->queue_seconds.observe(e.queue_s);
        m_->ttft_seconds.observe(e.ttft_s);
        m_->prefill_seconds.observe(std::max(0.0, e.ttft_s - e.queue_s));
        // Tokens that arrive with the first one have no gap of their own.
      } else {
        const double gap = std::chrono::duration<double>(te.arrived - last_).count() / static_cast<double>(n);
        for (std::size_t i = 0; i < n; ++i) m_->inter_token_seconds.observe(gap);
      }
      last_ = te.arrived;
    }
    if (e.finish != ServeFinish::kNone && have_first_) {
      m_->decode_seconds.observe(std::chrono::duration<double>(last_ - first_).count());
    }
  }

 private:
  ServerMetrics* m_;
  bool have_first_ = false;
  Clock::time_point first_, last_;
};

// Per-request state shared by the handler, the stream provider and the sink.
struct Job {
  CompletionEnv env;
  Prepared prep;
  bool chat = false;
  ResponseMeta meta;
  std::shared_ptr<EventQueue> queue = std::make_shared<EventQueue>();
  ServeId id = 0;
  LatencyRecorder latency{nullptr};
  // Accumulated over the events.
  std::string text;
  std::vector<SampleResult> samples;
  Usage usage;
  std::size_t text_offset = 0;  // completions logprobs: byte offset of the next token
  bool finished = false;        // the final event was handled
  bool role_sent = false;

  void take_usage(const ServeEvent& e) {
    if (e.prompt_tokens > 0) usage.prompt_tokens = e.prompt_tokens;
    if (e.cached_tokens > 0) usage.cached_tokens = e.cached_tokens;
    if (e.finish != ServeFinish::kNone) usage.completion_tokens = e.completion_tokens;
  }
};

ApiError finish_error(const ServeEvent& e) {
  ApiError err;
  if (e.finish == ServeFinish::kCancelled) {
    err.status = 503;
    err.type = "server_error";
    err.message = "the request was cancelled (the server is shutting down)";
  } else {
    err.status = 500;
    err.type = "server_error";
    err.message = e.error.empty() ? "generation failed" : e.error;
  }
  return err;
}

void respond_whole(Job& job, httplib::Response& res) {
  const Tokenizer& tok = job.env.engine->tokenizer();
  ServeEvent last;
  while (!job.finished) {
    for (TimedEvent& te : job.queue->pop_all(kPollInterval)) {
      job.latency.on_event(te);
      ServeEvent& e = te.event;
      job.take_usage(e);
      job.text += e.text;
      for (SampleResult& s : e.samples) job.samples.push_back(std::move(s));
      if (e.finish != ServeFinish::kNone) {
        job.finished = true;
        last = std::move(e);
      }
    }
  }
  if (last.finish != ServeFinish::kStop && last.finish != ServeFinish::kLength) {
    return write_error(res, finish_error(last));
  }
  if (job.usage.prompt_tokens == 0) job.usage.prompt_tokens = static_cast<int>(job.prep.req.prompt.size());
  Choice choice;
  choice.text = job.prep.echo_text + job.text;
  choice.finish_reason = finish_reason_name(last.finish);
  choice.text_offset = job.prep.echo_text.size();
  if (job.prep.want_logprobs) choice.logprobs = to_logprobs(tok, job.samples);
  const json body = job.chat ? chat_completion_response(job.meta, choice, job.usage)
                             : completion_response(job.meta, choice, job.usage);
  res.status = 200;
  res.set_content(dump_json(body), "application/json");
}

// The SSE chunks for one event, appended to `out`.
void stream_event(Job& job, const ServeEvent& e, std::string& out) {
  const Tokenizer& tok = job.env.engine->tokenizer();
  std::optional<std::vector<TokenLogprob>> lps;
  if (job.prep.want_logprobs && !e.samples.empty()) lps = to_logprobs(tok, e.samples);
  const bool final = e.finish != ServeFinish::kNone;
  if (final && e.finish != ServeFinish::kStop && e.finish != ServeFinish::kLength) {
    out += sse_event(to_json(finish_error(e)));
    out += sse_done();
    return;
  }
  const std::string reason = final ? finish_reason_name(e.finish) : "";
  if (job.chat) {
    if (!e.text.empty() || lps) out += sse_event(chat_chunk_delta(job.meta, e.text, lps));
    if (final) out += sse_event(chat_chunk_finish(job.meta, reason));
  } else if (!e.text.empty() || lps || final) {
    Choice c;
    c.text = e.text;
    c.finish_reason = reason;
    c.logprobs = std::move(lps);
    c.text_offset = job.text_offset;
    out += sse_event(completion_chunk(job.meta, c));
    if (c.logprobs) {
      for (const TokenLogprob& t : *c.logprobs) job.text_offset += t.token.size();
    }
  }
  if (final) {
    if (job.prep.include_usage) {
      if (job.usage.prompt_tokens == 0)
        job.usage.prompt_tokens = static_cast<int>(job.prep.req.prompt.size());
      out += sse_event(usage_chunk(job.meta, job.usage, job.chat));
    }
    out += sse_done();
  }
}

// One call of httplib's chunked content provider: waits briefly for events
// and writes their chunks. Returning false drops the connection.
bool stream_step(Job& job, httplib::DataSink& sink) {
  std::string out;
  if (!job.role_sent) {
    job.role_sent = true;
    if (job.chat) {
      out += sse_event(chat_chunk_role(job.meta));
    } else if (!job.prep.echo_text.empty()) {
      Choice c;
      c.text = job.prep.echo_text;
      out += sse_event(completion_chunk(job.meta, c));
      job.text_offset = job.prep.echo_text.size();
    }
  }
  for (TimedEvent& te : job.queue->pop_all(out.empty() ? kPollInterval : std::chrono::milliseconds(0))) {
    job.latency.on_event(te);
    job.take_usage(te.event);
    stream_event(job, te.event, out);
    if (te.event.finish != ServeFinish::kNone) {
      job.finished = true;
      break;
    }
  }
  if (!out.empty() && !sink.write(out.data(), out.size())) return false;
  if (job.finished) {
    sink.done();
    return true;
  }
  // Nothing to say: still check that someone is listening.
  return !out.empty() || sink.is_writable();
}

}  // namespace

const char* finish_reason_name(ServeFinish f) {
  switch (f) {
    case ServeFinish::kStop:
      return "stop";
    case ServeFinish::kLength:
      return "length";
    default:
      return "";
  }
}

void write_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump_json(to_json(e)), "application/json");
}

void handle_completion(CompletionEnv env, const httplib::Request& req, httplib::Response& res, bool chat) {
  auto job = std::make_shared<Job>();
  job->env = std::move(env);
  job->chat = chat;
  job->latency = LatencyRecorder(job->env.metrics);
  ApiResult<Prepared> prep = prepare(job->env, req.body, chat);
  if (!prep.ok()) {
    write_error(res, prep.error());
    return job->env.on_finished();
  }
  job->prep = std::move(prep).value();
  job->meta.id = format_response_id(chat ? "chatcmpl" : "cmpl", job->env.serial);
  job->meta.created = static_cast<int64_t>(std::time(nullptr));
  job->meta.model = job->prep.model;

  ServeRequest sreq = job->prep.req;  // keep the prompt for usage fallbacks
  Result<ServeId> id =
      job->env.engine->submit(std::move(sreq), [q = job->queue](ServeEvent&& e) { q->push(std::move(e)); });
  if (!id.is_ok()) {
    ApiError e = api_error_from_status(id.status());
    if (e.code == "context_length_exceeded" && !chat) e.param = "prompt";
    // The adapter was unloaded since prepare() found it.
    if (id.status().code() == ErrorCode::kNotFound) {
      e = model_not_found(job->prep.model, served_model_names(*job->env.engine, job->env.model_name));
    }
    write_error(res, e);
    return job->env.on_finished();
  }
  job->id = *id;

  if (!job->prep.stream) {
    respond_whole(*job, res);
    return job->env.on_finished();
  }
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [job](size_t /*offset*/, httplib::DataSink& sink) { return stream_step(*job, sink); },
      [job](bool /*success*/) {
        // The client went away (or the listener stopped) before the end.
        if (!job->finished) job->env.engine->cancel(job->id);
        job->env.on_finished();
      });
}

}  // namespace agentkv::server
