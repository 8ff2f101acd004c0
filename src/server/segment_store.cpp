#include "server/segment_store.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "util/mmap.h"

namespace agentkv::server {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kFormat = "agentkv-segments";
constexpr int kVersion = 1;
// Far above any pool this engine runs (a 2^26-token file is ~0.5 GB of
// JSON); a bigger file is not read.
constexpr size_t kMaxFileBytes = size_t{1} << 30;

std::string path_of(const std::string& dir) { return (fs::path(dir) / kSegmentFileName).string(); }

// One saved entry, or the reason it cannot be one.
Result<SegmentSpec> entry_of(const json& e) {
  if (!e.is_object()) return make_error(ErrorCode::kParse, "not an object");
  SegmentSpec s;
  for (const char* key : {"id", "tenant", "cache_salt"}) {
    auto it = e.find(key);
    if (it == e.end() || !it->is_string()) return make_error(ErrorCode::kParse, "'", key, "' is not a string");
  }
  s.id = e["id"].get<std::string>();
  s.tenant = e["tenant"].get<std::string>();
  s.cache_salt = e["cache_salt"].get<std::string>();
  auto t = e.find("tokens");
  if (t == e.end() || !t->is_array() || t->empty()) {
    return make_error(ErrorCode::kParse, "'tokens' is not a non-empty array");
  }
  s.tokens.reserve(t->size());
  for (const json& v : *t) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return make_error(ErrorCode::kParse, "'tokens' holds something other than a token id");
    }
    s.tokens.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return s;
}

}  // namespace

Status check_segment_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return make_error(ErrorCode::kInvalidArgument, "--segment-dir ", dir, " is not a directory (create it first)");
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return make_error(ErrorCode::kInvalidArgument, "--segment-dir ", dir,
                      " is not writable: the segments could not be saved at shutdown");
  }
  return Status::ok();
}

Status save_segments(const std::string& dir, const std::string& model_id, const std::vector<SegmentSpec>& segs) {
  json doc = {{"format", kFormat}, {"version", kVersion}, {"model_id", model_id}, {"segments", json::array()}};
  for (const SegmentSpec& s : segs) {
    doc["segments"].push_back(
        {{"id", s.id}, {"tenant", s.tenant}, {"cache_salt", s.cache_salt}, {"tokens", s.tokens}});
  }
  const std::string path = path_of(dir), tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << doc.dump() << '\n';
    f.flush();
    if (!f) return make_error(ErrorCode::kIo, "cannot write ", tmp);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return make_error(ErrorCode::kIo, "cannot rename ", tmp, " to ", path, ": ", ec.message());
  return Status::ok();
}

std::vector<SegmentSpec> load_segments(const std::string& dir, const std::string& model_id,
                                       std::vector<std::string>* warnings) {
  const std::string path = path_of(dir);
  Result<MappedFile> f = MappedFile::open(path);
  if (!f.is_ok() && f.status().code() == ErrorCode::kNotFound) return {};  // nothing saved yet
  auto warn = [&](const std::string& s) { warnings->push_back(path + ": " + s); };
  if (!f.is_ok() || f->size() > kMaxFileBytes) {
    warn(f.is_ok() ? "is larger than 1 GiB; no segment restored"
                   : "cannot be read (" + f.status().message() + "); no segment restored");
    return {};
  }
  std::vector<std::string> problems;
  std::vector<SegmentSpec> out =
      parse_segment_file(std::string_view(reinterpret_cast<const char*>(f->data()), f->size()), model_id, &problems);
  for (const std::string& p : problems) warn(p);
  return out;
}

std::vector<SegmentSpec> parse_segment_file(std::string_view text, const std::string& model_id,
                                            std::vector<std::string>* warnings) {
  auto warn = [&](const std::string& s) { warnings->push_back(s); };
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    warn("is not valid JSON (a partial write, or not ours); no segment restored");
    return {};
  }
  auto format = doc.find("format"), version = doc.find("version"), model = doc.find("model_id"),
       segs = doc.find("segments");
  if (format == doc.end() || *format != kFormat || version == doc.end() || !version->is_number_integer() ||
      *version != kVersion) {
    warn(std::string("is not an agentkv segment file of version ") + std::to_string(kVersion) +
         "; no segment restored");
    return {};
  }
  if (model == doc.end() || !model->is_string() || segs == doc.end() || !segs->is_array()) {
    warn("lacks 'model_id' or 'segments'; no segment restored");
    return {};
  }
  if (model->get<std::string>() != model_id) {
    warn("was saved for another model file (model_id " + model->get<std::string>().substr(0, 40) +
         ", this one is " + model_id + "): its " + std::to_string(segs->size()) + " segments are skipped");
    return {};
  }
  std::vector<SegmentSpec> out;
  for (size_t i = 0; i < segs->size(); ++i) {
    Result<SegmentSpec> s = entry_of((*segs)[i]);
    if (!s.is_ok()) {
      warn("segment #" + std::to_string(i) + " skipped: " + s.status().message());
      continue;
    }
    out.push_back(std::move(s).value());
  }
  return out;
}

}  // namespace agentkv::server
