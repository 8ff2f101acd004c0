#include "server/adapter_path.h"

#include <sys/stat.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <optional>

namespace agentkv::server {
namespace {

namespace fs = std::filesystem;

const char* const kOutside =
    "lora_path must name an adapter inside the server's adapter directory (--lora-dir); relative paths are "
    "taken from there";

std::optional<std::string> real_path(const std::string& p, int* err) {
  char buf[PATH_MAX];
  if (::realpath(p.c_str(), buf) == nullptr) {
    *err = errno;
    return std::nullopt;
  }
  return std::string(buf);
}

bool inside(const std::string& dir, const std::string& path) {
  if (dir == "/") return path.size() > 1 && path[0] == '/';
  return path.size() > dir.size() + 1 && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/';
}

bool regular_or_dir(const std::string& resolved, bool* is_dir) {
  struct stat sb {};
  if (::stat(resolved.c_str(), &sb) != 0) return false;
  *is_dir = S_ISDIR(sb.st_mode);
  return S_ISREG(sb.st_mode) || *is_dir;
}

ApiError not_found(const std::string& requested) {
  ApiError e = bad_request("lora_path", "No adapter found at lora_path '" + requested + "'");
  e.status = 404;
  e.code = "adapter_not_found";
  return e;
}

}  // namespace

Result<std::string> canonical_lora_dir(const std::string& dir) {
  int err = 0;
  std::optional<std::string> r = dir.empty() ? std::nullopt : real_path(dir, &err);
  bool is_dir = false;
  if (!r || !regular_or_dir(*r, &is_dir) || !is_dir) {
    return make_error(ErrorCode::kInvalidArgument, "--lora-dir ", dir, ": not a directory");
  }
  return *r;
}

ApiResult<std::string> confine_adapter_path(const std::string& lora_dir, const std::string& requested) {
  // No directory, no loading: never "everything under the root".
  if (lora_dir.empty() || lora_dir[0] != '/') return bad_request("lora_path", kOutside);
  if (requested.empty() || requested.find('\0') != std::string::npos)
    return bad_request("lora_path", kOutside);
  const fs::path req(requested);
  for (const fs::path& part : req) {
    if (part == "..") return bad_request("lora_path", "lora_path must not contain '..'");
  }
  const std::string candidate = req.is_absolute() ? requested : lora_dir + "/" + requested;
  // Refused before the file system is asked, so a path outside tells nothing
  // about what exists there.
  if (!inside(lora_dir, fs::path(candidate).lexically_normal().string()))
    return bad_request("lora_path", kOutside);
  int err = 0;
  std::optional<std::string> resolved = real_path(candidate, &err);
  if (!resolved) {
    if (err == ENOENT || err == ENOTDIR) return not_found(requested);
    return bad_request("lora_path", "lora_path '" + requested + "' cannot be resolved");
  }
  if (!inside(lora_dir, *resolved)) return bad_request("lora_path", kOutside);  // a symlink out
  bool is_dir = false;
  if (!regular_or_dir(*resolved, &is_dir)) {
    return bad_request("lora_path", "lora_path must be a regular file (GGUF) or a directory (PEFT)");
  }
  if (is_dir) {
    // The loader opens the files inside: they must pass the same test.
    std::error_code ec;
    for (const fs::directory_entry& entry : fs::directory_iterator(*resolved, ec)) {
      std::optional<std::string> r = real_path(entry.path().string(), &err);
      bool sub_dir = false;
      if (!r || !inside(lora_dir, *r) || !regular_or_dir(*r, &sub_dir)) {
        return bad_request("lora_path", "lora_path '" + requested + "' holds '" +
                                            entry.path().filename().string() +
                                            "', which is not a regular file inside the adapter directory");
      }
    }
    if (ec) return bad_request("lora_path", "lora_path '" + requested + "' cannot be listed");
  }
  return *resolved;
}

}  // namespace agentkv::server
