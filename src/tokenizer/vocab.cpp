// vocab_from_gguf: the tokenizer.ggml.* keys of a model file.
#include <string>

#include "tokenizer/tokenizer.h"

namespace agentkv {

namespace {

constexpr std::string_view kPrefix = "tokenizer.ggml.";

std::string key(std::string_view name) { return std::string(kPrefix) + std::string(name); }

// Optional keys: absent leaves `out` alone, present with another type is an error.
Status read_opt_bool(const GgufFile& f, std::string_view name, bool& out) {
  const std::string k = key(name);
  if (!f.find(k)) return Status::ok();
  AKV_ASSIGN_OR_RETURN(out, f.get_bool(k));
  return Status::ok();
}

Status read_opt_id(const GgufFile& f, std::string_view name, size_t n_tokens, int32_t& out) {
  const std::string k = key(name);
  if (!f.find(k)) return Status::ok();
  AKV_ASSIGN_OR_RETURN(int64_t v, f.get_int(k));
  if (v < 0 || static_cast<uint64_t>(v) >= n_tokens) {
    return make_error(ErrorCode::kOutOfRange, k, " = ", v, " is outside the vocabulary (", n_tokens,
                      " tokens)");
  }
  out = static_cast<int32_t>(v);
  return Status::ok();
}

}  // namespace

Result<Vocab> vocab_from_gguf(const GgufFile& f, int64_t n_vocab_required) {
  Vocab v;
  AKV_ASSIGN_OR_RETURN(std::string model, f.get_string(key("model")));
  if (model == "gpt2") {
    v.kind = Vocab::Kind::kBpe;
    v.add_space_prefix = false;
  } else if (model == "llama") {
    v.kind = Vocab::Kind::kSpm;
    // llama.cpp's defaults for SentencePiece vocabularies without these keys.
    v.add_bos = true;
    v.add_space_prefix = true;
  } else {
    return make_error(ErrorCode::kUnsupported, "unsupported tokenizer model '", model,
                      "' (supported: gpt2 = byte-level BPE, llama = SentencePiece BPE)");
  }
  if (f.find(key("pre"))) {
    AKV_ASSIGN_OR_RETURN(v.pre, f.get_string(key("pre")));
  }

  AKV_ASSIGN_OR_RETURN(v.tokens, f.get_string_array(key("tokens")));
  const size_t n = v.tokens.size();
  if (n == 0) return make_error(ErrorCode::kParse, key("tokens"), " is empty");
  if (n > static_cast<size_t>(INT32_MAX)) return make_error(ErrorCode::kOutOfRange, "too many tokens: ", n);

  if (f.find(key("scores")) || v.kind == Vocab::Kind::kSpm) {
    AKV_ASSIGN_OR_RETURN(std::vector<double> scores, f.get_float_array(key("scores")));
    if (scores.size() != n) {
      return make_error(ErrorCode::kParse, key("scores"), " has ", scores.size(), " entries for ", n,
                        " tokens");
    }
    v.scores.assign(scores.begin(), scores.end());
  }
  if (f.find(key("token_type"))) {
    AKV_ASSIGN_OR_RETURN(std::vector<int64_t> types, f.get_int_array(key("token_type")));
    if (types.size() != n) {
      return make_error(ErrorCode::kParse, key("token_type"), " has ", types.size(), " entries for ", n,
                        " tokens");
    }
    v.types.reserve(n);
    for (int64_t t : types) {
      if (t < kTokenUndefined || t > kTokenByte) {
        return make_error(ErrorCode::kParse, key("token_type"), " has unknown type ", t);
      }
      v.types.push_back(static_cast<int32_t>(t));
    }
  }
  if (v.kind == Vocab::Kind::kBpe) {
    AKV_ASSIGN_OR_RETURN(v.merges, f.get_string_array(key("merges")));
  }

  if (v.kind == Vocab::Kind::kSpm) {
    // Defaults only where they name a real token.
    v.unk_id = n > 0 ? 0 : -1;
    v.bos_id = n > 1 ? 1 : -1;
    v.eos_id = n > 2 ? 2 : -1;
  }
  AKV_RETURN_IF_ERROR(read_opt_id(f, "bos_token_id", n, v.bos_id));
  AKV_RETURN_IF_ERROR(read_opt_id(f, "eos_token_id", n, v.eos_id));
  AKV_RETURN_IF_ERROR(read_opt_id(f, "unknown_token_id", n, v.unk_id));
  AKV_RETURN_IF_ERROR(read_opt_id(f, "padding_token_id", n, v.pad_id));
  AKV_RETURN_IF_ERROR(read_opt_id(f, "eot_token_id", n, v.eot_id));
  AKV_RETURN_IF_ERROR(read_opt_bool(f, "add_bos_token", v.add_bos));
  AKV_RETURN_IF_ERROR(read_opt_bool(f, "add_eos_token", v.add_eos));
  AKV_RETURN_IF_ERROR(read_opt_bool(f, "add_space_prefix", v.add_space_prefix));
  if (v.add_bos && v.bos_id < 0)
    return make_error(ErrorCode::kParse, "add_bos_token is set but there is no bos token");
  if (v.add_eos && v.eos_id < 0)
    return make_error(ErrorCode::kParse, "add_eos_token is set but there is no eos token");

  if (f.find("tokenizer.chat_template")) {
    AKV_ASSIGN_OR_RETURN(v.chat_template, f.get_string("tokenizer.chat_template"));
  }
  if (n_vocab_required > 0 && static_cast<int64_t>(n) < n_vocab_required) {
    return make_error(ErrorCode::kParse, "vocabulary has ", n, " tokens, model needs ", n_vocab_required);
  }
  return v;
}

}  // namespace agentkv
