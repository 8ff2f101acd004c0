#include "util/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace agentkv {

namespace {
LogLevel level_from_env() {
  const char* e = std::getenv("AGENTKV_LOG");
  if (!e) return LogLevel::kWarn;
  if (!std::strcmp(e, "debug")) return LogLevel::kDebug;
  if (!std::strcmp(e, "info")) return LogLevel::kInfo;
  if (!std::strcmp(e, "error")) return LogLevel::kError;
  return LogLevel::kWarn;
}
std::atomic<int> g_level{static_cast<int>(level_from_env())};
std::mutex g_mu;
}  // namespace

LogLevel log_level() { return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed)); }
void log_set_level(LogLevel level) { g_level.store(static_cast<int>(level)); }

void log_write(LogLevel level, const std::string& msg) {
  static const char* names[] = {"debug", "info", "warn", "error"};
  std::lock_guard<std::mutex> lk(g_mu);
  std::fprintf(stderr, "[agentkv %s] %s\n", names[static_cast<int>(level)], msg.c_str());
}

}  // namespace agentkv
