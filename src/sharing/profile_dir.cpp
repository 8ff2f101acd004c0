#include "sharing/profile_dir.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>
#include <vector>

namespace agentkv {

namespace {

// Profiles are a few KB; anything far larger is not one.
constexpr std::uintmax_t kMaxProfileBytes = 1 << 20;

bool is_profile_of(const std::filesystem::path& path, std::string_view format, std::string_view model_id) {
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec || size > kMaxProfileBytes) return false;
  std::ifstream f(path);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return false;
  const auto fmt = j.find("format");
  if (fmt == j.end() || !fmt->is_string() || fmt->get<std::string>() != format) return false;
  const auto model = j.find("model");
  if (model == j.end() || !model->is_object()) return false;
  const auto id = model->find("id");
  return id != model->end() && id->is_string() && id->get<std::string>() == model_id;
}

}  // namespace

std::string find_profile(const std::string& dir, std::string_view suffix, std::string_view format,
                         std::string_view model_id) {
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) return "";
  std::vector<std::filesystem::path> candidates;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > suffix.size() && name.ends_with(suffix) && it->is_regular_file(ec)) {
      candidates.push_back(it->path());
    }
  }
  std::sort(candidates.begin(), candidates.end());
  for (const std::filesystem::path& p : candidates) {
    if (is_profile_of(p, format, model_id)) return p.string();
  }
  return "";
}

}  // namespace agentkv
