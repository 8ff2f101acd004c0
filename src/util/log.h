// Minimal leveled logging to stderr. AGENTKV_LOG=debug|info|warn|error.
#pragma once

#include <sstream>
#include <string>

namespace agentkv {

enum class LogLevel { kDebug = 0, kInfo, kWarn, kError };

LogLevel log_level();
void log_set_level(LogLevel level);
void log_write(LogLevel level, const std::string& msg);

template <typename... Args>
void log_msg(LogLevel level, const Args&... args) {
  if (level < log_level()) return;
  std::ostringstream os;
  (os << ... << args);
  log_write(level, os.str());
}

}  // namespace agentkv

#define AKV_LOG_DEBUG(...) ::agentkv::log_msg(::agentkv::LogLevel::kDebug, __VA_ARGS__)
#define AKV_LOG_INFO(...) ::agentkv::log_msg(::agentkv::LogLevel::kInfo, __VA_ARGS__)
#define AKV_LOG_WARN(...) ::agentkv::log_msg(::agentkv::LogLevel::kWarn, __VA_ARGS__)
#define AKV_LOG_ERROR(...) ::agentkv::log_msg(::agentkv::LogLevel::kError, __VA_ARGS__)
