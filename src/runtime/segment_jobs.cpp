// Frozen segments' prefills (segment_jobs.h).
#include "runtime/segment_jobs.h"

#include <algorithm>
#include <cctype>

namespace agentkv {

bool valid_segment_id(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  }
  return true;
}

SegmentInfo segment_info(const FrozenSegment& s) {
  SegmentInfo i;
  i.id = s.id;
  i.tenant = s.keys.tenant;
  i.cache_salt = s.keys.cache_salt;
  i.tokens = static_cast<int32_t>(s.tokens.size());
  i.blocks = s.n_blocks;
  i.hits = s.hits;
  i.created = static_cast<double>(s.created_ms) / 1000.0;
  i.last_used = static_cast<double>(s.last_used_ms) / 1000.0;
  i.evicted = s.evicted;
  return i;
}

Result<std::string> SegmentJobs::name(const std::string& wanted, const FrozenSegments& frozen) {
  if (wanted.empty()) {
    std::string id;
    do {
      id = "seg-" + std::to_string(next_++);
    } while (frozen.find(id) != nullptr);
    return id;
  }
  bool taken = frozen.find(wanted) != nullptr;
  for (const auto& [rid, job] : jobs_) taken |= job.seg_id == wanted;
  if (taken) return make_error(ErrorCode::kInvalidArgument, "segment id '", wanted, "' is taken");
  // A restored "seg-<n>": the engine's own names continue after it.
  if (wanted.rfind("seg-", 0) == 0 && wanted.size() > 4 && wanted.size() <= 20 &&
      wanted.find_first_not_of("0123456789", 4) == std::string::npos) {
    const uint64_t n = std::stoull(wanted.substr(4));
    next_ = std::max(next_, n + 1);
  }
  return wanted;
}

void SegmentJobs::finish(ServeId id, ServeFinish why, const std::string& error, KvManager& kv,
                         const std::function<void()>& pinned) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  Job job = std::move(it->second);
  jobs_.erase(it);
  if (why == ServeFinish::kCancelled) {
    job.done->set_value(
        make_error(ErrorCode::kUnavailable, "the segment's prefill was cancelled (shutting down)"));
    return;
  }
  if (why == ServeFinish::kError) {
    job.done->set_value(make_error(ErrorCode::kInternal, "the segment's prefill failed: ", error));
    return;
  }
  ExtraKeys keys;
  keys.tenant = job.spec.tenant;
  keys.cache_salt = job.spec.cache_salt;
  Result<int32_t> n = kv.freeze_segment(job.seg_id, job.spec.tokens, keys);
  if (!n.is_ok()) {
    job.done->set_value(
        make_error(ErrorCode::kInternal, "the segment's KV could not be pinned: ", n.status().message()));
    return;
  }
  pinned();
  job.done->set_value(segment_info(*kv.frozen().find(job.seg_id)));
}

}  // namespace agentkv
