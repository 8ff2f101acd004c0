#include "server/completion_handler.h"

#include <httplib.h>

#include <chrono>
#include <ctime>
#include <memory>
#include <utility>

#include "runtime/event_queue.h"
#include "server/completion_prepare.h"
#include "server/http_server.h"
#include "server/models_handler.h"
#include "server/openai_response.h"
#include "server/tool_call_parser.h"
#include "tokenizer/tokenizer.h"

namespace agentkv::server {
namespace {

// "```json\n\n```" and the like: code fence lines and whitespace, nothing else.
bool only_code_fences(std::string_view t) {
  size_t i = 0;
  while (i < t.size()) {
    const size_t end = std::min(t.find('\n', i), t.size());
    std::string_view line = t.substr(i, end - i);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r' || line.back() == '\t')) line.remove_suffix(1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (!line.empty() && !line.starts_with("```")) return false;
    if (line.size() > 3 && line.find_first_not_of("abcdefghijklmnopqrstuvwxyz", 3) != std::string_view::npos)
      return false;
    i = end + 1;
  }
  return true;
}

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr auto kPollInterval = std::chrono::milliseconds(100);

std::vector<int32_t> token_ids_of(const std::vector<SampleResult>& samples) {
  std::vector<int32_t> ids;
  ids.reserve(samples.size());
  for (const SampleResult& s : samples) ids.push_back(s.id);
  return ids;
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

ToolCallOut to_out(ToolCall&& c) { return {std::move(c.id), std::move(c.name), std::move(c.arguments)}; }
ToolCallOut to_out(ToolCallDelta&& d) { return {std::move(d.id), std::move(d.name), std::move(d.arguments)}; }

std::string trim_ws(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// finish_reason with tool calls: "tool_calls" when the model stopped after calling.
std::string reason_with_tools(ServeFinish f, int n_calls) {
  if (n_calls > 0 && f == ServeFinish::kStop) return "tool_calls";
  return finish_reason_name(f);
}

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

// One choice: a sequence in the engine, and what it has produced so far.
struct ChoiceState {
  int prompt = 0;  // index into Prepared::prompts
  ServeId id = 0;
  bool submitted = false;
  bool seen = false;      // an event arrived: the prompt's KV is in the prefix cache
  bool finished = false;  // its final event arrived
  ServeEvent last;        // that final event
  std::string text;
  std::vector<SampleResult> samples;
  std::vector<SampleResult> prompt_logprobs;  // echo + logprobs: the leader's, for prompt tokens 1..
  std::size_t text_offset = 0;  // completions logprobs: byte offset of the next token
  bool echo_sent = false;       // leader, stream with echo + logprobs: its prompt's echo chunks are out
  LatencyRecorder latency{nullptr};
  int prompt_tokens = 0;
  int cached_tokens = 0;
  int reused_tokens = 0;
  int64_t computed_token_layers = 0;
  double reuse_rate = 0;
  int completion_tokens = 0;
  std::string kv_sharing;
  bool lr_fallback = false;
  ToolCallParser tool_parser;  // chat with tools: content and calls of the text so far
  int n_tool_calls = 0;        // stream: calls begun
};

// Per-request state shared by the handler, the stream provider and the sinks.
//
// n > 1 shares one prefill: the first choice of each prompt (its leader) is
// submitted at once, the other n - 1 when the leader's first event arrives.
// By then the engine has committed the leader's full prompt blocks to the
// prefix cache (and the leader still holds them), so the followers compute
// only the prompt's last partial block.
struct Job {
  CompletionEnv env;
  Prepared prep;
  bool chat = false;
  ResponseMeta meta;
  std::shared_ptr<EventQueue> queue = std::make_shared<EventQueue>();
  std::vector<ChoiceState> choices;
  int n_finished = 0;
  bool finished = false;            // every choice finished, or the request failed
  std::optional<ApiError> failure;  // a choice could not be submitted, or failed in the engine
  bool opened = false;              // stream: the role / echo chunks were sent

  void init() {
    choices.resize(static_cast<std::size_t>(prep.n_choices()));
    for (std::size_t c = 0; c < choices.size(); ++c) {
      choices[c].prompt = static_cast<int>(c) / prep.n;
      choices[c].latency = LatencyRecorder(env.metrics);
      choices[c].text_offset = prep.echo_texts[choices[c].prompt].size();
      choices[c].tool_parser = ToolCallParser(prep.tool_format, prep.bare_call_triggers);
    }
  }

  std::optional<ApiError> submit(int c) {
    ChoiceState& ch = choices[c];
    ServeRequest r = prep.prompts[ch.prompt];
    r.sampling.seed = prep.seeds[c % prep.n];
    // One scoring of the prompt is enough, and followers must read the cache.
    if (c % prep.n != 0) r.prompt_logprobs = -1;
    Result<ServeId> id =
        env.engine->submit(std::move(r), [q = queue, c](ServeEvent&& e) { q->push(std::move(e), c); });
    if (!id.is_ok()) {
      ApiError e = api_error_from_status(id.status());
      if (e.code == "context_length_exceeded" && !chat) e.param = "prompt";
      // The adapter was unloaded since prepare_completion() found it.
      if (id.status().code() == ErrorCode::kNotFound) {
        e = model_not_found(prep.model, served_model_names(*env.engine, env.model_name));
      }
      return e;
    }
    ch.id = *id;
    ch.submitted = true;
    return std::nullopt;
  }

  void cancel_all() {
    for (ChoiceState& ch : choices) {
      if (ch.submitted && !ch.finished) env.engine->cancel(ch.id);
    }
  }

  void fail(ApiError e) {
    if (!failure) failure = std::move(e);
    finished = true;
    cancel_all();
  }

  // The bookkeeping of one event: usage, followers, completion. The caller
  // renders the event (stream) or accumulates it (whole response).
  void on_event(const TimedEvent& te) {
    ChoiceState& ch = choices[te.choice];
    const ServeEvent& e = te.event;
    ch.latency.on_event(te);
    if (e.prompt_tokens > 0) ch.prompt_tokens = e.prompt_tokens;
    if (e.cached_tokens > 0) ch.cached_tokens = e.cached_tokens;
    if (e.reused_tokens > 0) {
      ch.reused_tokens = e.reused_tokens;
      ch.computed_token_layers = e.prefill_token_layers;
      ch.reuse_rate = e.reuse_rate;
    }
    if (!e.kv_sharing.empty()) ch.kv_sharing = e.kv_sharing;
    ch.lr_fallback |= e.lr_fallback;
    if (!e.prompt_logprobs.empty()) ch.prompt_logprobs = e.prompt_logprobs;
    if (e.finish != ServeFinish::kNone) {
      ch.finished = true;
      ch.completion_tokens = e.completion_tokens;
      if (e.finish != ServeFinish::kStop && e.finish != ServeFinish::kLength) return fail(finish_error(e));
      if (++n_finished == static_cast<int>(choices.size())) finished = true;
    }
    if (!ch.seen) {
      ch.seen = true;
      if (te.choice % prep.n == 0 && !failure) {
        for (int j = 1; j < prep.n; ++j) {
          if (auto err = submit(te.choice + j)) return fail(std::move(*err));
        }
      }
    }
  }

  // Prompt tokens count once per prompt (as OpenAI), from its leader;
  // prefilled_tokens counts what every choice computed.
  Usage usage() const {
    Usage u;
    u.prefilled_tokens = 0;
    for (std::size_t c = 0; c < choices.size(); ++c) {
      const ChoiceState& ch = choices[c];
      const int n_prompt =
          ch.prompt_tokens > 0 ? ch.prompt_tokens : static_cast<int>(prep.prompts[ch.prompt].prompt.size());
      if (c % static_cast<std::size_t>(prep.n) == 0) {
        u.prompt_tokens += n_prompt;
        u.cached_tokens += ch.cached_tokens;
        u.reused_tokens += ch.reused_tokens;
        u.computed_token_layers += ch.computed_token_layers;
        // One rate for the response: the first prompt's (n > 1 shares its prefill).
        if (c == 0) u.reuse_rate = ch.reuse_rate;
      }
      u.completion_tokens += ch.completion_tokens;
      if (ch.submitted) u.prefilled_tokens += n_prompt - ch.cached_tokens;
    }
    u.kv_sharing = choices.empty() ? "" : choices[0].kv_sharing;
    u.lr_fallback = !choices.empty() && choices[0].lr_fallback;
    return u;
  }
};

// The echoed prompt's tokens for completions logprobs: the first unscored
// (null, as OpenAI), the rest from the prompt's leader.
std::vector<TokenLogprob> echo_logprobs(const Job& job, int prompt) {
  const Tokenizer& tok = job.env.engine->tokenizer();
  const std::vector<int32_t>& ids = job.prep.prompts[prompt].prompt;
  const std::vector<SampleResult>& scored = job.choices[prompt * job.prep.n].prompt_logprobs;
  std::vector<TokenLogprob> out;
  out.push_back({tok.token_to_piece(ids[0]), 0.0f, {}, /*scored=*/false});
  std::vector<TokenLogprob> rest = to_logprobs(tok, scored);
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

void respond_whole(Job& job, httplib::Response& res) {
  const Tokenizer& tok = job.env.engine->tokenizer();
  while (!job.finished) {
    for (TimedEvent& te : job.queue->pop_all(kPollInterval)) {
      job.on_event(te);
      ChoiceState& ch = job.choices[te.choice];
      ch.text += te.event.text;
      for (SampleResult& s : te.event.samples) ch.samples.push_back(std::move(s));
      if (te.event.finish != ServeFinish::kNone) ch.last = std::move(te.event);
      if (job.finished) break;
    }
  }
  if (job.failure) return write_error(res, *job.failure);
  std::vector<Choice> out;
  for (std::size_t c = 0; c < job.choices.size(); ++c) {
    const ChoiceState& ch = job.choices[c];
    const std::string& echo = job.prep.echo_texts[ch.prompt];
    Choice choice;
    choice.index = static_cast<int>(c);
    choice.text = echo + ch.text;
    choice.finish_reason = finish_reason_name(ch.last.finish);
    if (job.prep.tool_choice != ToolChoice::kNone) {
      ParsedToolCalls parsed = parse_tool_calls(job.prep.tool_format, ch.text, job.prep.bare_call_triggers);
      for (ToolCall& t : parsed.calls) choice.tool_calls.push_back(to_out(std::move(t)));
      const bool calls_only = job.prep.tool_choice != ToolChoice::kAuto;
      choice.text = calls_only && !choice.tool_calls.empty() ? "" : trim_ws(parsed.content);
      // A bare call the model fenced leaves its fence behind: that alone is no content.
      if (!choice.tool_calls.empty() && only_code_fences(choice.text)) choice.text.clear();
      choice.finish_reason = reason_with_tools(ch.last.finish, static_cast<int>(choice.tool_calls.size()));
    }
    choice.text_offset = echo.size();
    if (job.prep.want_logprobs) choice.logprobs = to_logprobs(tok, ch.samples);
    if (job.prep.want_token_ids) choice.token_ids = token_ids_of(ch.samples);
    if (job.prep.echo_logprobs) {
      std::vector<TokenLogprob> lps = echo_logprobs(job, ch.prompt);
      lps.insert(lps.end(), choice.logprobs->begin(), choice.logprobs->end());
      choice.logprobs = std::move(lps);
      choice.text_offset = 0;
    }
    out.push_back(std::move(choice));
  }
  const Usage usage = job.usage();
  const json body = job.chat ? chat_completion_response(job.meta, out, usage) : completion_response(job.meta, out, usage);
  res.status = 200;
  res.set_content(dump_json(body), "application/json");
}

// The SSE chunks for one event of choice `c`, appended to `out`.
void stream_event(Job& job, int c, const ServeEvent& e, std::string& out) {
  const Tokenizer& tok = job.env.engine->tokenizer();
  ChoiceState& ch = job.choices[c];
  std::optional<std::vector<TokenLogprob>> lps;
  if (job.prep.want_logprobs && !e.samples.empty()) lps = to_logprobs(tok, e.samples);
  const bool final = e.finish != ServeFinish::kNone;
  const std::string reason = final ? finish_reason_name(e.finish) : "";
  if (job.chat && job.prep.tool_choice != ToolChoice::kNone) {
    ToolCallParser::Out parsed = ch.tool_parser.push(e.text);
    if (final) parsed.content += ch.tool_parser.flush().content;
    // required / named: the separators between calls are not content.
    if (job.prep.tool_choice != ToolChoice::kAuto) parsed.content.clear();
    if (!parsed.content.empty() || lps) out += sse_event(chat_chunk_delta(job.meta, parsed.content, lps, c));
    for (ToolCallDelta& d : parsed.deltas) {
      if (!d.id.empty()) ++ch.n_tool_calls;
      out += sse_event(chat_chunk_tool_call(job.meta, d.index, to_out(std::move(d)), c));
    }
    if (final) out += sse_event(chat_chunk_finish(job.meta, reason_with_tools(e.finish, ch.n_tool_calls), c));
  } else if (job.chat) {
    if (!e.text.empty() || lps) out += sse_event(chat_chunk_delta(job.meta, e.text, lps, c));
    if (final) out += sse_event(chat_chunk_finish(job.meta, reason, c));
  } else if (!e.text.empty() || lps || final) {
    Choice choice;
    choice.index = c;
    choice.text = e.text;
    choice.finish_reason = reason;
    choice.logprobs = std::move(lps);
    choice.text_offset = ch.text_offset;
    if (job.prep.want_token_ids) choice.token_ids = token_ids_of(e.samples);
    out += sse_event(completion_chunk(job.meta, choice));
    if (choice.logprobs) {
      for (const TokenLogprob& t : *choice.logprobs) ch.text_offset += t.token.size();
    }
  }
}

// echo + logprobs in a stream: the echo chunk of every choice of `prompt`,
// with the prompt's scores, once its leader's first event has brought them
// (before any of those choices' own chunks: followers start after it).
void stream_echo(Job& job, int prompt, std::string& out) {
  ChoiceState& leader = job.choices[prompt * job.prep.n];
  if (leader.echo_sent) return;
  leader.echo_sent = true;
  const std::vector<TokenLogprob> lps = echo_logprobs(job, prompt);
  std::size_t end = 0;
  for (const TokenLogprob& t : lps) end += t.token.size();
  for (int j = 0; j < job.prep.n; ++j) {
    const int c = prompt * job.prep.n + j;
    Choice choice;
    choice.index = c;
    choice.text = job.prep.echo_texts[prompt];
    choice.logprobs = lps;
    out += sse_event(completion_chunk(job.meta, choice));
    job.choices[c].text_offset = end;
  }
}

// One call of httplib's chunked content provider: waits briefly for events
// and writes their chunks. Returning false drops the connection.
bool stream_step(Job& job, httplib::DataSink& sink) {
  std::string out;
  if (!job.opened) {
    job.opened = true;
    for (std::size_t c = 0; c < job.choices.size(); ++c) {
      const std::string& echo = job.prep.echo_texts[job.choices[c].prompt];
      if (job.chat) {
        out += sse_event(chat_chunk_role(job.meta, static_cast<int>(c)));
      } else if (!echo.empty() && !job.prep.echo_logprobs) {  // else: with the prompt's scores (stream_echo)
        Choice choice;
        choice.index = static_cast<int>(c);
        choice.text = echo;
        out += sse_event(completion_chunk(job.meta, choice));
      }
    }
  }
  for (TimedEvent& te : job.queue->pop_all(out.empty() ? kPollInterval : std::chrono::milliseconds(0))) {
    job.on_event(te);
    if (job.failure) {
      out += sse_event(to_json(*job.failure));
      out += sse_done();
      break;
    }
    if (job.prep.echo_logprobs && te.choice % job.prep.n == 0) stream_echo(job, te.choice / job.prep.n, out);
    stream_event(job, te.choice, te.event, out);
    if (job.finished) {
      if (job.prep.include_usage) out += sse_event(usage_chunk(job.meta, job.usage(), job.chat));
      out += sse_done();
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
  ApiResult<Prepared> prep = prepare_completion(job->env, req.body, chat);
  if (!prep.ok()) {
    write_error(res, prep.error());
    return job->env.on_finished();
  }
  job->prep = std::move(prep).value();
  job->init();
  job->meta.id = format_response_id(chat ? "chatcmpl" : "cmpl", job->env.serial);
  job->meta.created = static_cast<int64_t>(std::time(nullptr));
  job->meta.model = job->prep.model;

  // The leaders now; their followers once they have prefilled (Job::on_event).
  for (int c = 0; c < job->prep.n_choices(); c += job->prep.n) {
    if (auto err = job->submit(c)) {
      job->cancel_all();
      write_error(res, *err);
      return job->env.on_finished();
    }
  }

  if (!job->prep.stream) {
    respond_whole(*job, res);
    return job->env.on_finished();
  }
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [job](size_t /*offset*/, httplib::DataSink& sink) { return stream_step(*job, sink); },
      [job](bool /*success*/) {
        // The client went away (or the listener stopped) before the end.
        if (!job->finished || job->failure) job->cancel_all();
        job->env.on_finished();
      });
}

}  // namespace agentkv::server
