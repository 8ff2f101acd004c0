// `agentkv tokenize`: text to token ids with the model's tokenizer.
#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "format/gguf.h"
#include "model/model_spec.h"
#include "tokenizer/tokenizer.h"

namespace agentkv::cli {

namespace {
struct TokenizeArgs {
  std::string model = default_model_path();
  std::string text;
  bool no_special = false;
  bool no_bos = false;
  bool pieces = false;
};

void run(const TokenizeArgs& a) {
  auto f = GgufFile::open(a.model);
  if (!f.is_ok()) return fail(f.status());
  auto spec = model_spec_from_gguf(*f);
  if (!spec.is_ok()) return fail(spec.status().with_context(a.model));
  auto vocab = vocab_from_gguf(*f, spec->n_vocab);
  if (!vocab.is_ok()) return fail(vocab.status().with_context(a.model));
  auto tok = Tokenizer::create(std::move(vocab).value());
  if (!tok.is_ok()) return fail(tok.status());
  auto ids = tok->encode(a.text, !a.no_bos, !a.no_special);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (a.pieces) {
      std::printf("%d\t%s\n", ids[i], escape_piece(tok->token_to_piece(ids[i])).c_str());
    } else {
      std::printf("%s%d", i ? "," : "", ids[i]);
    }
  }
  if (!a.pieces) std::printf("\n");
}
}  // namespace

void register_tokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text");
  cmd->add_option("-m,--model", a->model, "GGUF model file")->capture_default_str();
  // A positional that begins with '-' reads as options ("-hello" is -h,
  // help), so such text goes after "--" or in --text=.
  CLI::Option* positional = cmd->add_option("text", a->text,
                                            "text to tokenize; text that begins with '-' goes after '--' "
                                            "(tokenize -- -x) or in --text=-x");
  CLI::Option* named = cmd->add_option("--text", a->text, "text to tokenize (instead of the positional)");
  positional->excludes(named);
  cmd->footer("Text that begins with '-': agentkv tokenize -- \"-x\"  or  agentkv tokenize --text=\"-x\"");
  cmd->add_flag("--no-special", a->no_special, "treat control-token text such as <|im_start|> as plain text");
  cmd->add_flag("--no-bos", a->no_bos, "do not add BOS/EOS even if the vocabulary asks for them");
  cmd->add_flag("--pieces", a->pieces, "one token per line with its text");
  cmd->callback([a, positional, named] {
    if (positional->count() + named->count() == 0) {
      return fail(
          make_error(ErrorCode::kInvalidArgument, "tokenize: give the text (a positional, or --text)"));
    }
    run(*a);
  });
}

}  // namespace agentkv::cli
