// `agentkv chat-template`: what a chat request's prompt becomes, as the
// server renders it: the text, which bytes came from the request (they never
// become control tokens), and the token ids. --batch renders many templates
// and conversations without a model (the reference tests compare it with
// Python's jinja2).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "format/gguf.h"
#include "model/model_spec.h"
#include "tokenizer/chat_renderer.h"
#include "tokenizer/jinja_template.h"
#include "tokenizer/tokenizer.h"

namespace agentkv::cli {

namespace {

using json = nlohmann::ordered_json;

struct ChatTemplateArgs {
  std::string model = default_model_path();
  std::string chat_template;
  std::string messages = R"([{"role": "user", "content": "Hello!"}])";
  std::string tools;
  bool no_generation_prompt = false;
  bool tokens = false;
  bool show_spans = false;
  bool show_source = false;
  std::string batch;
};

// A flag's value, or the contents of the file it names after '@'.
Result<std::string> value_or_file(const std::string& v) {
  if (v.empty() || v[0] != '@') return v;
  std::ifstream f(v.substr(1), std::ios::binary);
  if (!f) return make_error(ErrorCode::kNotFound, "cannot read ", v.substr(1));
  return std::string(std::istreambuf_iterator<char>(f), {});
}

json spans_json(const MarkedText& t) {
  json spans = json::array();
  for (const TextSpan& s : t.input_spans) spans.push_back({s.begin, s.end});
  return spans;
}

// One JSON object per input line: {"template", "messages", "tools"?,
// "add_generation_prompt"?, "bos_token"?, "eos_token"?} in, {"text",
// "input_spans"} or {"error"} out.
Status run_batch(const std::string& path) {
  std::ifstream in_file;
  std::istream* in = &std::cin;
  if (path != "-") {
    in_file.open(path);
    if (!in_file) return make_error(ErrorCode::kNotFound, "cannot read ", path);
    in = &in_file;
  }
  std::string line;
  while (std::getline(*in, line)) {
    if (line.empty()) continue;
    json out;
    const json req = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!req.is_object() || !req.contains("template") || !req["template"].is_string()) {
      out["error"] = "each line is a JSON object with a \"template\" string";
    } else {
      Result<JinjaTemplate> t = JinjaTemplate::compile(req["template"].get<std::string>());
      if (!t.is_ok()) {
        out["error"] = t.status().message();
      } else {
        json input = {{"messages", req.value("messages", json::array())}};
        if (req.contains("tools")) input["tools"] = req["tools"];
        const json own = {{"bos_token", req.value("bos_token", "")},
                          {"eos_token", req.value("eos_token", "")},
                          {"add_generation_prompt", req.value("add_generation_prompt", true)}};
        Result<MarkedText> r = t->render(input.dump(), own.dump());
        if (r.is_ok()) {
          out["text"] = r->text;
          out["input_spans"] = spans_json(*r);
          out["steps"] = r->render_steps;
          out["bytes"] = r->render_bytes;
        } else {
          out["error"] = r.status().message();
        }
      }
    }
    std::printf("%s\n", out.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
  }
  return Status::ok();
}

Status run(const ChatTemplateArgs& a) {
  if (!a.batch.empty()) return run_batch(a.batch);
  AKV_ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(a.model));
  // Only the tokenizer is read: an architecture the engine cannot run yet
  // still renders.
  Result<ModelSpec> spec = model_spec_from_gguf(f);
  AKV_ASSIGN_OR_RETURN(Vocab vocab, vocab_from_gguf(f, spec.is_ok() ? spec->n_vocab : 0));
  AKV_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::create(std::move(vocab)));
  if (a.show_source) {
    const Vocab& v = tok.vocab();
    const auto text = [&](int32_t id) {
      return id >= 0 && id < static_cast<int32_t>(v.tokens.size()) ? v.tokens[id] : std::string();
    };
    std::printf("%s\n", json{{"template", v.chat_template}, {"bos_token", text(v.bos_id)},
                             {"eos_token", text(v.eos_id)}}
                             .dump(-1, ' ', false, json::error_handler_t::replace)
                             .c_str());
    return Status::ok();
  }
  AKV_ASSIGN_OR_RETURN(ChatRenderer chat, ChatRenderer::create(tok, a.chat_template));
  std::fprintf(stderr, "agentkv: chat template: %s\n", chat.description().c_str());
  AKV_ASSIGN_OR_RETURN(const std::string messages, value_or_file(a.messages));
  AKV_ASSIGN_OR_RETURN(const std::string tools, value_or_file(a.tools));
  AKV_ASSIGN_OR_RETURN(MarkedText text, chat.render(messages, tools, !a.no_generation_prompt));
  if (a.show_spans) {
    std::printf("%s\n", json{{"text", text.text}, {"input_spans", spans_json(text)}}.dump().c_str());
  } else {
    std::fwrite(text.text.data(), 1, text.text.size(), stdout);
    if (text.text.empty() || text.text.back() != '\n') std::printf("\n");
  }
  if (a.tokens) {
    const std::vector<int32_t> ids = chat.tokenize(tok, text);
    for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? "," : "", ids[i]);
    std::printf("\n");
  }
  return Status::ok();
}

}  // namespace

void register_chat_template(CLI::App& app) {
  auto a = std::make_shared<ChatTemplateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "chat-template", "Render a chat conversation as the server would: the prompt text, and its tokens");
  cmd->add_option("-m,--model", a->model, "GGUF model file (its tokenizer and tokenizer.chat_template)")
      ->capture_default_str();
  cmd->add_option("--chat-template", a->chat_template,
                  "as serve's: empty for the model's own, chatml|llama3|mistral|gemma, or a .jinja file");
  cmd->add_option("--messages", a->messages, "the messages as a JSON array (OpenAI's shape), or @FILE")
      ->capture_default_str();
  cmd->add_option("--tools", a->tools, "the tools as a JSON array (OpenAI's shape), or @FILE");
  cmd->add_flag("--no-generation-prompt", a->no_generation_prompt, "do not open the assistant's turn");
  cmd->add_flag("--tokens", a->tokens, "also print the token ids (request text never becomes control tokens)");
  cmd->add_flag("--spans", a->show_spans, "print JSON: the text and the byte ranges that came from the request");
  cmd->add_flag("--source", a->show_source,
                "print JSON: the model file's tokenizer.chat_template and its bos and eos tokens' text");
  cmd->add_option("--batch", a->batch,
                  "render each line of a JSONL file (- for stdin) without a model: {\"template\", \"messages\", "
                  "\"tools\", \"add_generation_prompt\", \"bos_token\", \"eos_token\"} in, {\"text\", "
                  "\"input_spans\"} or {\"error\"} out");
  cmd->callback([a] {
    if (Status st = run(*a); !st.is_ok()) fail(st);
  });
}

}  // namespace agentkv::cli
