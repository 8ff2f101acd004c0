#include <algorithm>
#include "server/openai_request.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/json_field.h"

namespace agentkv::server {
namespace {

using json = nlohmann::json;

// nlohmann's parser is iterative, but a guard here keeps any recursive walk of
// the result (ours, dump, destruction) bounded whatever the library version.
bool nesting_within(std::string_view body, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

}  // namespace

ApiResult<json> parse_json_object(std::string_view body, const RequestLimits& limits) {
  if (body.size() > limits.max_body_bytes) {
    ApiError e;
    e.status = 413;
    e.code = "request_too_large";
    e.message = "request body is " + std::to_string(body.size()) + " bytes; the limit is " +
                std::to_string(limits.max_body_bytes);
    return e;
  }
  if (!nesting_within(body, kMaxJsonDepth)) {
    return bad_request("", "JSON nesting deeper than " + std::to_string(kMaxJsonDepth));
  }
  // One set of keys per open object, to reject duplicates.
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  bool has_duplicate = false;
  const json::parser_callback_t on_event = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      keys.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      if (!keys.empty()) keys.pop_back();
    } else if (event == json::parse_event_t::key && !keys.empty()) {
      if (!keys.back().insert(parsed.get<std::string>()).second && !has_duplicate) {
        has_duplicate = true;
        duplicate = parsed.get<std::string>();
      }
    }
    return true;
  };
  json doc;
  try {
    doc = json::parse(body.begin(), body.end(), on_event, /*allow_exceptions=*/true);
  } catch (const json::exception& ex) {
    // The message names the position and the problem (e.g. ill-formed UTF-8).
    // nlohmann appends the bytes it last read, which may be invalid UTF-8
    // themselves; drop them so the error body always serialises.
    std::string what = ex.what();
    if (auto cut = what.find("; last read"); cut != std::string::npos) what.resize(cut);
    for (char& c : what) {
      if (static_cast<unsigned char>(c) >= 0x80) c = '?';
    }
    return bad_request("", "invalid JSON body: " + what);
  }
  if (has_duplicate) return bad_request(duplicate, "duplicate key '" + duplicate + "'");
  if (!doc.is_object()) return bad_request("", "the request body must be a JSON object");
  return doc;
}

namespace {

MaybeError read_string(const json& obj, const char* key, std::optional<std::string>& out) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) return wrong_type(key, "a string", *v);
  out = v->get<std::string>();
  return std::nullopt;
}

MaybeError read_bool(const json& obj, const char* key, bool& out) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return wrong_type(key, "a boolean", *v);
  out = v->get<bool>();
  return std::nullopt;
}

// An integer in [lo, hi]; floats such as 5.0 are rejected.
MaybeError read_int(const json& v, const std::string& param, int64_t lo, int64_t hi, int64_t& out) {
  if (!v.is_number_integer()) return wrong_type(param, "an integer", v);
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return bad_request(param, param + " must be at most " + std::to_string(hi));
  }
  const int64_t x = v.get<int64_t>();
  if (x < lo) return bad_request(param, param + " must be at least " + std::to_string(lo) + ", got " + std::to_string(x));
  if (x > hi) return bad_request(param, param + " must be at most " + std::to_string(hi) + ", got " + std::to_string(x));
  out = x;
  return std::nullopt;
}

MaybeError read_number(const json& obj, const char* key, double lo, double hi, bool lo_open, float& out) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) return wrong_type(key, "a number", *v);
  const double x = v->get<double>();
  if (x < lo || x > hi || (lo_open && x == lo)) {
    return bad_request(key, std::string(key) + " must be in " + (lo_open ? "(" : "[") + json(lo).dump() + ", " +
                                json(hi).dump() + "], got " + v->dump());
  }
  out = static_cast<float>(x);
  return std::nullopt;
}

// "kv_sharing" (agentkv extension): "name", "exact+reuse", ["exact", "reuse"],
// or {"scheme": "name", "reuse": "name", parameters...}. A composition is
// kept as "exact+reuse"; the registry checks the pair.
MaybeError read_kv_sharing(const json& obj, SamplingFields& s) {
  const json* v = field(obj, "kv_sharing");
  if (!v) return std::nullopt;
  if (v->is_string()) {
    s.kv_sharing = v->get<std::string>();
  } else if (v->is_array()) {
    if (v->size() != 2) {
      return bad_request("kv_sharing",
                         "kv_sharing as a list composes two schemes, an exact adapter scheme and a "
                         "segment-reuse one (as [\"alora\", \"sparsex\"]); it has " +
                             std::to_string(v->size()) + " (one scheme is a string)");
    }
    std::string joined;
    for (const json& e : *v) {
      if (!e.is_string()) return wrong_type("kv_sharing", "a list of scheme names", e);
      if (!joined.empty()) joined += '+';
      joined += e.get<std::string>();
    }
    s.kv_sharing = std::move(joined);
  } else if (v->is_object()) {
    for (const auto& item : v->items()) {
      // A named string, not a structured binding: clang 14 (the fuzz build)
      // rejects a lambda that captures a binding.
      const std::string& key = item.key();
      const bool known = key == "scheme" || key == "reuse" ||
                         std::any_of(std::begin(kKvSharingFields), std::end(kKvSharingFields),
                                     [&](const KvSharingField& f) { return key == f.name; });
      if (!known) {
        std::string expected = "scheme, reuse";
        for (const KvSharingField& f : kKvSharingFields) expected += std::string(", ") + f.name;
        return bad_request("kv_sharing." + key,
                           "unknown kv_sharing parameter '" + key + "' (expected " + expected + ")");
      }
    }
    const json* name = field(*v, "scheme");
    if (!name) return bad_request("kv_sharing.scheme", "kv_sharing as an object needs a \"scheme\"");
    if (!name->is_string()) return wrong_type("kv_sharing.scheme", "a string", *name);
    s.kv_sharing = name->get<std::string>();
    if (const json* reuse = field(*v, "reuse")) {
      if (!reuse->is_string()) return wrong_type("kv_sharing.reuse", "a string", *reuse);
      *s.kv_sharing += "+" + reuse->get<std::string>();
    }
    KvSharingParams& p = s.kv_sharing_params;
    for (const KvSharingField& f : kKvSharingFields) {
      const json* x = field(*v, f.name);
      if (!x) continue;
      const std::string param = std::string("kv_sharing.") + f.name;
      if (f.real) {
        if (!x->is_number()) return wrong_type(param, "a number", *x);
        p.*f.real = x->get<double>();
      } else if (f.list) {
        if (!x->is_array()) return wrong_type(param, "an array of integers", *x);
        if (x->size() > 4096) return bad_request(param, param + " has more than 4096 entries");
        std::vector<int32_t> out;
        for (const json& e : *x) {
          int64_t n = 0;
          AKV_API_TRY(read_int(e, param, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), n));
          out.push_back(static_cast<int32_t>(n));
        }
        p.*f.list = std::move(out);
      } else {
        int64_t n = 0;
        AKV_API_TRY(read_int(*x, param, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), n));
        p.*f.integer = static_cast<int32_t>(n);
      }
    }
  } else {
    return wrong_type("kv_sharing", "a string or an object", *v);
  }
  if (s.kv_sharing->empty()) return bad_request("kv_sharing", "kv_sharing must not be empty");
  return std::nullopt;
}

MaybeError read_max_tokens(const json& obj, const char* key, const RequestLimits& limits, std::optional<int>& out) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  int64_t x = 0;
  AKV_API_TRY(read_int(*v, key, 1, limits.max_tokens, x));
  out = static_cast<int>(x);
  return std::nullopt;
}

MaybeError read_stop(const json& obj, std::vector<std::string>& out) {
  const json* v = field(obj, "stop");
  if (!v) return std::nullopt;
  if (v->is_string()) {
    if (v->get_ref<const std::string&>().empty()) return bad_request("stop", "stop strings must not be empty");
    out.push_back(v->get<std::string>());
    return std::nullopt;
  }
  if (!v->is_array()) return wrong_type("stop", "a string or an array of strings", *v);
  if (v->size() > static_cast<std::size_t>(kMaxStopStrings)) {
    return bad_request("stop", "at most " + std::to_string(kMaxStopStrings) + " stop strings are allowed, got " +
                                   std::to_string(v->size()));
  }
  for (const json& s : *v) {
    if (!s.is_string()) return wrong_type("stop", "a string or an array of strings", s);
    if (s.get_ref<const std::string&>().empty()) return bad_request("stop", "stop strings must not be empty");
    out.push_back(s.get<std::string>());
  }
  return std::nullopt;
}

// One logit_bias entry, range-checked.
MaybeError add_bias(int64_t id, int64_t hi, const json& bias, std::vector<std::pair<int32_t, float>>& out) {
  if (id < 0 || id > hi) {
    return bad_request("logit_bias", "logit_bias token id " + std::to_string(id) + " is not in [0, " +
                                         std::to_string(hi) + "]");
  }
  // llama-server's `false` means "never": our -100 (exp(-100) underflows in float).
  const double b = bias.is_boolean() && !bias.get<bool>() ? -100.0 : bias.is_number() ? bias.get<double>() : NAN;
  if (std::isnan(b)) return wrong_type("logit_bias", "a map from token ids to numbers", bias);
  if (b < -100.0 || b > 100.0) {
    return bad_request("logit_bias", "logit_bias values must be in [-100, 100], got " + bias.dump() + " for token " +
                                         std::to_string(id));
  }
  out.emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
  return std::nullopt;
}

// {"<token id>": bias, ...} as OpenAI (keys are decimal ids), or
// [[id, bias], ...] as llama-server (bias false bans the token).
MaybeError read_logit_bias(const json& obj, const RequestLimits& limits, std::vector<std::pair<int32_t, float>>& out) {
  const json* v = field(obj, "logit_bias");
  if (!v) return std::nullopt;
  const int64_t hi = limits.vocab_size > 0 ? limits.vocab_size - 1 : std::numeric_limits<int32_t>::max();
  if (v->is_array()) {
    for (const json& pair : *v) {
      if (!pair.is_array() || pair.size() != 2) return wrong_type("logit_bias", "a list of [token id, bias] pairs", pair);
      if (!pair[0].is_number_integer()) {
        return bad_request("logit_bias", "logit_bias pairs must start with a token id (token texts are not supported)");
      }
      const bool too_big = pair[0].is_number_unsigned() && pair[0].get<uint64_t>() > uint64_t(INT64_MAX);
      AKV_API_TRY(add_bias(too_big ? -1 : pair[0].get<int64_t>(), hi, pair[1], out));
    }
    return std::nullopt;
  }
  if (!v->is_object()) return wrong_type("logit_bias", "an object mapping token ids to biases", *v);
  for (const auto& [key, bias] : v->items()) {
    const bool digits = !key.empty() && key.size() <= 10 && key.find_first_not_of("0123456789") == std::string::npos;
    if (!digits) return bad_request("logit_bias", "logit_bias key '" + key + "' is not a token id");
    AKV_API_TRY(add_bias(std::stoll(key), hi, bias, out));
  }
  return std::nullopt;
}

MaybeError read_stop_token_ids(const json& obj, const RequestLimits& limits, std::vector<int32_t>& out) {
  const json* v = field(obj, "stop_token_ids");
  if (!v) return std::nullopt;
  if (!v->is_array()) return wrong_type("stop_token_ids", "an array of token ids", *v);
  if (v->size() > static_cast<std::size_t>(kMaxStopTokenIds)) {
    return bad_request("stop_token_ids", "at most " + std::to_string(kMaxStopTokenIds) + " stop_token_ids are allowed");
  }
  const int64_t hi = limits.vocab_size > 0 ? limits.vocab_size - 1 : std::numeric_limits<int32_t>::max();
  for (const json& t : *v) {
    int64_t id = 0;
    AKV_API_TRY(read_int(t, "stop_token_ids", 0, hi, id));
    out.push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

// The fields both endpoints share. `chat` also reads max_completion_tokens,
// which OpenAI prefers over the deprecated max_tokens there.
MaybeError read_sampling(const json& obj, const RequestLimits& limits, bool chat, SamplingFields& s) {
  std::optional<std::string> model;
  AKV_API_TRY(read_string(obj, "model", model));
  if (model) s.model = *model;

  AKV_API_TRY(read_max_tokens(obj, "max_tokens", limits, s.max_tokens));
  // llama-server's name; -1 is "until the context ends", as absent.
  if (const json* v = field(obj, "n_predict"); v && !s.max_tokens && !(v->is_number_integer() && *v == -1)) {
    AKV_API_TRY(read_max_tokens(obj, "n_predict", limits, s.max_tokens));
  }
  if (chat) {
    std::optional<int> mct;
    AKV_API_TRY(read_max_tokens(obj, "max_completion_tokens", limits, mct));
    if (mct) s.max_tokens = mct;
  }
  AKV_API_TRY(read_number(obj, "temperature", 0.0, 2.0, false, s.temperature));
  AKV_API_TRY(read_number(obj, "top_p", 0.0, 1.0, true, s.top_p));
  if (const json* v = field(obj, "top_k")) {
    int64_t k = 0;
    AKV_API_TRY(read_int(*v, "top_k", -1, std::numeric_limits<int32_t>::max(), k));
    s.top_k = k < 0 ? 0 : static_cast<int>(k);
  }
  AKV_API_TRY(read_number(obj, "min_p", 0.0, 1.0, false, s.min_p));
  // The ranges vLLM's SamplingParams accepts.
  // llama-server calls it repeat_penalty (over its last repeat_last_n
  // tokens; we apply it over the whole prompt + output, as vLLM).
  for (const char* key : {"repetition_penalty", "repeat_penalty"}) {
    const json* v = field(obj, key);
    if (!v) continue;
    if (!v->is_number()) return wrong_type(key, "a number", *v);
    const double r = v->get<double>();
    if (!(r > 0.0) || r > std::numeric_limits<float>::max()) {
      return bad_request(key, std::string(key) + " must be > 0, got " + v->dump());
    }
    s.repetition_penalty = static_cast<float>(r);
    break;
  }
  AKV_API_TRY(read_number(obj, "frequency_penalty", -2.0, 2.0, false, s.frequency_penalty));
  AKV_API_TRY(read_number(obj, "presence_penalty", -2.0, 2.0, false, s.presence_penalty));
  AKV_API_TRY(read_logit_bias(obj, limits, s.logit_bias));
  AKV_API_TRY(read_stop_token_ids(obj, limits, s.stop_token_ids));
  AKV_API_TRY(read_bool(obj, "ignore_eos", s.ignore_eos));
  AKV_API_TRY(read_bool(obj, "return_token_ids", s.return_token_ids));
  if (const json* v = field(obj, "seed")) {
    int64_t seed = 0;
    AKV_API_TRY(read_int(*v, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), seed));
    s.seed = seed;
  }
  AKV_API_TRY(read_stop(obj, s.stop));
  if (const json* v = field(obj, "n")) {
    int64_t n = 0;
    AKV_API_TRY(read_int(*v, "n", 1, kMaxN, n));
    s.n = static_cast<int>(n);
  }
  AKV_API_TRY(read_bool(obj, "stream", s.stream));
  if (const json* v = field(obj, "stream_options")) {
    if (!v->is_object()) return wrong_type("stream_options", "an object", *v);
    if (!s.stream) return bad_request("stream_options", "stream_options is only allowed when stream is true");
    if (const json* u = field(*v, "include_usage")) {
      if (!u->is_boolean()) return wrong_type("stream_options.include_usage", "a boolean", *u);
      s.include_usage = u->get<bool>();
    }
  }
  AKV_API_TRY(read_string(obj, "cache_salt", s.cache_salt));
  if (s.cache_salt && s.cache_salt->empty()) return bad_request("cache_salt", "cache_salt must not be empty");
  AKV_API_TRY(read_kv_sharing(obj, s));
  AKV_API_TRY(read_string(obj, "session_id", s.session_id));
  if (s.session_id && !valid_session_id(*s.session_id)) {
    return bad_request("session_id", "session_id must be 1-128 of [A-Za-z0-9._:-]");
  }
  if (const json* v = field(obj, "session_retention_s")) {
    if (!v->is_number() || !(v->get<double>() > 0) || !std::isfinite(v->get<double>())) {
      return bad_request("session_retention_s", "session_retention_s must be a number of seconds > 0");
    }
    s.session_retention_s = v->get<double>();
  }
  return std::nullopt;
}

MaybeError read_token_ids(const json& arr, const RequestLimits& limits, std::vector<int32_t>& out) {
  if (arr.empty()) return bad_request("prompt", "prompt must not be empty");
  if (arr.size() > limits.max_prompt_tokens) {
    return bad_request("prompt", "prompt has " + std::to_string(arr.size()) + " tokens; the limit is " +
                                     std::to_string(limits.max_prompt_tokens));
  }
  const int64_t hi = limits.vocab_size > 0 ? limits.vocab_size - 1 : std::numeric_limits<int32_t>::max();
  out.reserve(arr.size());
  for (const json& t : arr) {
    if (!t.is_number_integer()) return wrong_type("prompt", "a string or an array of integer token ids", t);
    int64_t id = 0;
    AKV_API_TRY(read_int(t, "prompt", 0, hi, id));
    out.push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

// prompt: "text", [ids], ["text", ...] or [[ids], ...]. A list is all texts
// or all id lists, as OpenAI's schema.
MaybeError read_prompt(const json& obj, const RequestLimits& limits, CompletionRequest& r) {
  const json* v = field(obj, "prompt");
  if (!v) return bad_request("prompt", "prompt is required");
  if (v->is_string()) {
    r.prompts.push_back({false, v->get<std::string>(), {}});
    return std::nullopt;
  }
  if (!v->is_array()) return wrong_type("prompt", "a string or an array of integer token ids", *v);
  if (v->empty()) return bad_request("prompt", "prompt must not be empty");
  const json& first = v->front();
  if (!first.is_string() && !first.is_array()) {
    PromptInput p{true, {}, {}};
    AKV_API_TRY(read_token_ids(*v, limits, p.tokens));
    r.prompts.push_back(std::move(p));
    return std::nullopt;
  }
  if (v->size() > static_cast<std::size_t>(kMaxChoices)) {
    return bad_request("prompt", "at most " + std::to_string(kMaxChoices) + " prompts are allowed, got " +
                                     std::to_string(v->size()));
  }
  for (const json& item : *v) {
    if (first.is_string()) {
      if (!item.is_string()) return wrong_type("prompt", "a list of strings or a list of token id lists", item);
      r.prompts.push_back({false, item.get<std::string>(), {}});
    } else {
      if (!item.is_array()) return wrong_type("prompt", "a list of strings or a list of token id lists", item);
      PromptInput p{true, {}, {}};
      AKV_API_TRY(read_token_ids(item, limits, p.tokens));
      r.prompts.push_back(std::move(p));
    }
  }
  return std::nullopt;
}

bool known_role(const std::string& role) {
  return role == "system" || role == "developer" || role == "user" || role == "assistant" || role == "tool";
}

MaybeError read_content(const json* v, const std::string& param, std::string& out) {
  if (v->is_string()) {
    out = v->get<std::string>();
    return std::nullopt;
  }
  if (!v->is_array()) return wrong_type(param, "a string or an array of content parts", *v);
  for (std::size_t i = 0; i < v->size(); ++i) {
    const json& part = (*v)[i];
    const std::string p = param + "[" + std::to_string(i) + "]";
    if (!part.is_object()) return wrong_type(p, "an object", part);
    const json* type = field(part, "type");
    if (!type || !type->is_string()) return bad_request(p + ".type", p + ".type must be a string");
    if (type->get_ref<const std::string&>() != "text") {
      return bad_request(p + ".type", "only text content parts are supported, got '" + type->get<std::string>() + "'");
    }
    const json* text = field(part, "text");
    if (!text || !text->is_string()) return bad_request(p + ".text", p + ".text must be a string");
    out += text->get_ref<const std::string&>();
  }
  return std::nullopt;
}

MaybeError read_messages(const json& obj, const RequestLimits& limits, std::vector<ChatMessage>& out) {
  const json* v = field(obj, "messages");
  if (!v) return bad_request("messages", "messages is required");
  if (!v->is_array()) return wrong_type("messages", "an array", *v);
  if (v->empty()) return bad_request("messages", "messages must not be empty");
  if (v->size() > limits.max_messages) {
    return bad_request("messages", "at most " + std::to_string(limits.max_messages) + " messages are allowed");
  }
  for (std::size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return wrong_type(p, "an object", m);
    ChatMessage msg;
    const json* role = field(m, "role");
    if (!role) return bad_request(p + ".role", p + ".role is required");
    if (!role->is_string()) return wrong_type(p + ".role", "a string", *role);
    msg.role = role->get<std::string>();
    if (!known_role(msg.role)) {
      return bad_request(p + ".role", "unknown role '" + msg.role + "'; expected system, developer, user, assistant or tool");
    }
    if (const json* c = field(m, "content")) {
      AKV_API_TRY(read_content(c, p + ".content", msg.content));
    } else if (msg.role != "assistant") {
      // An assistant turn may carry only tool calls; every other role speaks.
      return bad_request(p + ".content", p + ".content is required");
    }
    if (const json* n = field(m, "name")) {
      if (!n->is_string()) return wrong_type(p + ".name", "a string", *n);
      msg.name = n->get<std::string>();
    }
    if (const json* tc = field(m, "tool_calls")) {
      if (msg.role != "assistant") return bad_request(p + ".tool_calls", "only assistant messages carry tool_calls");
      AKV_API_TRY(read_tool_calls(*tc, p + ".tool_calls", msg.tool_calls));
    }
    if (const json* t = field(m, "tool_call_id")) {
      if (!t->is_string()) return wrong_type(p + ".tool_call_id", "a string", *t);
      msg.tool_call_id = t->get<std::string>();
    }
    out.push_back(std::move(msg));
  }
  return std::nullopt;
}

}  // namespace

bool valid_session_id(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == ':' || c == '-';
  });
}

ApiResult<CompletionRequest> parse_completion_request(std::string_view body, const RequestLimits& limits) {
  ApiResult<json> doc = parse_json_object(body, limits);
  if (!doc.ok()) return doc.error();
  const json& obj = doc.value();
  CompletionRequest r;
  AKV_API_TRY(read_prompt(obj, limits, r));
  AKV_API_TRY(read_sampling(obj, limits, /*chat=*/false, r.sampling));
  if (r.prompts.size() * static_cast<std::size_t>(r.sampling.n) > static_cast<std::size_t>(kMaxChoices)) {
    return bad_request("n", "prompts x n is " + std::to_string(r.prompts.size() * r.sampling.n) +
                                "; at most " + std::to_string(kMaxChoices) + " choices per request");
  }
  if (const json* v = field(obj, "logprobs")) {
    int64_t lp = 0;
    AKV_API_TRY(read_int(*v, "logprobs", 0, kMaxTopLogprobs, lp));
    r.logprobs = static_cast<int>(lp);
  }
  AKV_API_TRY(read_bool(obj, "echo", r.echo));
  AKV_API_TRY(read_guided(obj, body, /*chat=*/false, r.guided));
  return r;
}

ApiResult<ChatRequest> parse_chat_request(std::string_view body, const RequestLimits& limits) {
  ApiResult<json> doc = parse_json_object(body, limits);
  if (!doc.ok()) return doc.error();
  const json& obj = doc.value();
  ChatRequest r;
  AKV_API_TRY(read_messages(obj, limits, r.messages));
  AKV_API_TRY(read_sampling(obj, limits, /*chat=*/true, r.sampling));
  AKV_API_TRY(read_bool(obj, "logprobs", r.logprobs));
  if (const json* v = field(obj, "top_logprobs")) {
    int64_t k = 0;
    AKV_API_TRY(read_int(*v, "top_logprobs", 0, kMaxTopLogprobs, k));
    if (!r.logprobs) return bad_request("top_logprobs", "top_logprobs requires logprobs to be true");
    r.top_logprobs = static_cast<int>(k);
  }
  AKV_API_TRY(read_guided(obj, body, /*chat=*/true, r.guided));
  return r;
}

}  // namespace agentkv::server
