// agentkv's error type, part of the public API: errors are values, Status
// for operations with no result, Result<T> for those with one. The CLI and
// the server turn them into one clear message; nothing on a request path
// aborts.
#pragma once

#include <cassert>
#include <sstream>
#include <string>
#include <utility>
#include <variant>

namespace agentkv {

enum class ErrorCode {
  kOk = 0,
  kInvalidArgument,  // the caller passed something wrong
  kNotFound,         // a file, key, tensor or model that does not exist
  kIo,               // the OS refused (open, read, mmap)
  kParse,            // malformed bytes in a file or request
  kUnsupported,      // valid but not implemented (a quant type, an arch)
  kOutOfRange,       // a count, size or offset outside its bounds
  kResourceExhausted,// memory or KV blocks ran out
  kUnavailable,      // draining or stopped: try again later / elsewhere
  kInternal,         // a bug in agentkv
};

const char* error_code_name(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }

  bool is_ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prefixes the message with context, e.g. the file name: "model.gguf: <message>".
  Status with_context(const std::string& context) const {
    if (is_ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

// Builds a message from any streamable values: errorf(kParse, "bad count ", n).
template <typename... Args>
Status make_error(ErrorCode code, const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return Status(code, os.str());
}

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}               // NOLINT(implicit)
  Result(Status status) : v_(std::move(status)) {         // NOLINT(implicit)
    assert(!std::get<Status>(v_).is_ok() && "Result from an ok Status");
  }

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace agentkv
