#include "tokenizer/jinja_template.h"

#include <exception>
#include <new>
#include <string>
#include <utility>

// llama.cpp's engine, from ~/.cache/agentkv/jinja-VER (scripts/setup_jinja.sh).
#include "jinja/lexer.h"
#include "jinja/parser.h"
#include "jinja/runtime.h"
#include "jinja/value.h"
#include "json.h"  // common_json, llama.cpp's (a pimpl: no nlohmann in it)

namespace agentkv {

struct JinjaTemplate::Impl {
  std::string source;
  jinja::program program;
  JinjaLimits limits;
};

namespace {

// The parser recurses once per bracket, block and unary operator; bounding
// how many are open at once bounds its stack before it runs.
Status check_nesting(const jinja::lexer_result& lexed, int max_nesting) {
  using T = jinja::token;
  int depth = 0, unary_run = 0;
  const auto& toks = lexed.tokens;
  for (size_t i = 0; i < toks.size(); ++i) {
    const T& t = toks[i];
    const bool after_statement_open = i > 0 && toks[i - 1].t == T::open_statement;
    switch (t.t) {
      case T::open_paren:
      case T::open_square_bracket:
      case T::open_curly_bracket:
        ++depth;
        break;
      case T::close_paren:
      case T::close_square_bracket:
      case T::close_curly_bracket:
        depth = depth > 0 ? depth - 1 : 0;
        break;
      case T::identifier:
        if (after_statement_open) {
          const std::string& w = t.value;
          if (w == "if" || w == "for" || w == "macro" || w == "call" || w == "filter" || w == "generation") {
            ++depth;
          } else if (w.rfind("end", 0) == 0) {
            depth = depth > 0 ? depth - 1 : 0;
          }
        }
        break;
      default:
        break;
    }
    const bool unary = t.t == T::unary_operator || (t.t == T::identifier && t.value == "not");
    unary_run = unary ? unary_run + 1 : 0;
    if (depth > max_nesting || unary_run > max_nesting) {
      return make_error(ErrorCode::kInvalidArgument, "the chat template nests deeper than ", max_nesting,
                        " brackets, blocks or operators (at byte ", t.pos, ")");
    }
  }
  return Status::ok();
}

// The budget of one render on this thread, restored when it ends.
class BudgetScope {
 public:
  BudgetScope(const JinjaLimits& l, size_t input_bytes) {
    const auto n = static_cast<int64_t>(input_bytes);
    steps = l.max_steps + l.steps_per_input_byte * n;
    bytes = l.max_bytes + l.bytes_per_input_byte * n;
    jinja::g_render_budget = {steps, bytes, l.max_depth};
  }
  int64_t steps_used() const { return steps - jinja::g_render_budget.steps_left; }
  int64_t bytes_used() const { return bytes - jinja::g_render_budget.bytes_left; }
  ~BudgetScope() { jinja::g_render_budget = {}; }
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  int64_t steps = 0, bytes = 0;
};

Status set_globals(jinja::context& ctx, std::string_view json_text, bool mark_input, const char* what) {
  common_json j = common_json::parse_no_throw(std::string(json_text));
  if (!j.is_object()) {
    return make_error(ErrorCode::kInvalidArgument, "the chat template's ", what, " is not a JSON object");
  }
  jinja::global_from_json(ctx, j, mark_input);
  return Status::ok();
}

}  // namespace

Result<JinjaTemplate> JinjaTemplate::compile(std::string source, const JinjaLimits& limits) {
  if (source.size() > limits.max_source_bytes) {
    return make_error(ErrorCode::kInvalidArgument, "the chat template is ", source.size(),
                      " bytes, above the limit of ", limits.max_source_bytes);
  }
  auto impl = std::make_shared<Impl>();
  impl->limits = limits;
  try {
    jinja::lexer lexer;
    const jinja::lexer_result lexed = lexer.tokenize(source);
    AKV_RETURN_IF_ERROR(check_nesting(lexed, limits.max_nesting));
    impl->program = jinja::parse_from_tokens(lexed);
  } catch (const std::exception& e) {
    return make_error(ErrorCode::kUnsupported, "the chat template cannot be parsed: ", e.what());
  }
  impl->source = std::move(source);
  return JinjaTemplate(std::move(impl));
}

Result<MarkedText> JinjaTemplate::render(std::string_view input_json, std::string_view own_json) const {
  const Impl& t = *impl_;
  MarkedText out;
  try {
    jinja::context ctx(t.source);
    AKV_RETURN_IF_ERROR(set_globals(ctx, input_json, /*mark_input=*/true, "input"));
    AKV_RETURN_IF_ERROR(set_globals(ctx, own_json, /*mark_input=*/false, "own variables"));
    BudgetScope budget(t.limits, input_json.size());
    jinja::runtime runtime(ctx);
    const jinja::value results = runtime.execute(t.program);
    const jinja::value_string parts = jinja::runtime::gather_string_parts(results);
    out.render_steps = budget.steps_used();
    out.render_bytes = budget.bytes_used();
    for (const jinja::string_part& p : parts->val_str.parts) {
      if (out.text.size() + p.val.size() > t.limits.max_output_bytes) {
        return make_error(ErrorCode::kResourceExhausted, "the chat template renders more than ",
                          t.limits.max_output_bytes, " bytes");
      }
      const size_t begin = out.text.size();
      out.text += p.val;
      if (p.is_input && !p.val.empty()) {
        if (!out.input_spans.empty() && out.input_spans.back().end == begin) {
          out.input_spans.back().end = out.text.size();
        } else {
          out.input_spans.push_back({begin, out.text.size()});
        }
      }
    }
  } catch (const jinja::raised_exception& e) {
    return make_error(ErrorCode::kInvalidArgument, "the chat template raised an exception: ", e.what());
  } catch (const std::bad_alloc&) {
    return make_error(ErrorCode::kResourceExhausted, "the chat template ran out of memory");
  } catch (const std::exception& e) {
    return make_error(ErrorCode::kInvalidArgument, "the chat template failed: ", e.what());
  }
  return out;
}

const std::string& JinjaTemplate::source() const { return impl_->source; }

}  // namespace agentkv
