// The frozen segment pool's API on the serving engine (SparseX §4): create
// (a prefill whose blocks are then pinned), delete, list, and the specs that
// serve --segment-dir saves. The KV manager's FrozenSegments does the pinning.
#include <cctype>

#include "runtime/serving_engine_impl.h"

namespace agentkv {

namespace {

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

}  // namespace

Result<SegmentInfo> ServingEngineImpl::create_segment(const SegmentSpec& spec) {
  const int64_t n = static_cast<int64_t>(spec.tokens.size());
  if (n == 0) return make_error(ErrorCode::kInvalidArgument, "the segment is empty");
  if (!opts_.prefix_caching) {
    return make_error(ErrorCode::kInvalidArgument, "frozen segments need prefix caching, which this server runs without");
  }
  if (n < opts_.block_size) {
    return make_error(ErrorCode::kInvalidArgument, "the segment has ", n, " tokens; a frozen segment needs at least one KV block (",
                      opts_.block_size, " tokens)");
  }
  if (!spec.id.empty() && !valid_segment_id(spec.id)) {
    return make_error(ErrorCode::kInvalidArgument, "segment id '", spec.id.substr(0, 64),
                      "' is not 1-64 characters of A-Z, a-z, 0-9, '.', '_' and '-'");
  }
  // The rest (vocabulary, context, pool size) is what submit() checks of a prompt.
  ServeRequest req;
  req.prompt = spec.tokens;
  req.max_tokens = 1;
  req.ignore_eos = true;
  req.tenant = spec.tenant;
  req.cache_salt = spec.cache_salt;
  req.kv_sharing = "none";  // exact K/V: the pinned blocks are what a full prefill writes
  auto done = std::make_shared<std::promise<Result<SegmentInfo>>>();
  std::future<Result<SegmentInfo>> result = done->get_future();
  AKV_RETURN_IF_ERROR(run_on_engine([&, done] {
    std::string seg_id = spec.id;
    if (!seg_id.empty()) {
      bool taken = kv_->frozen().find(seg_id) != nullptr;
      for (const auto& [rid, job] : segment_jobs_) taken |= job.seg_id == seg_id;
      if (taken) {
        done->set_value(make_error(ErrorCode::kInvalidArgument, "segment id '", seg_id, "' is taken"));
        return;
      }
      // A restored "seg-<n>": the engine's own names continue after it.
      if (seg_id.rfind("seg-", 0) == 0 && seg_id.size() > 4 && seg_id.size() <= 20 &&
          seg_id.find_first_not_of("0123456789", 4) == std::string::npos) {
        const uint64_t n = std::stoull(seg_id.substr(4));
        next_segment_ = std::max(next_segment_, n + 1);
      }
    } else {
      do {
        seg_id = "seg-" + std::to_string(next_segment_++);
      } while (kv_->frozen().find(seg_id) != nullptr);
    }
    Result<ServeId> id = submit(std::move(req), [](ServeEvent&&) {});
    if (!id.is_ok()) {
      done->set_value(id.status());
      return;
    }
    segment_jobs_[*id] = SegmentJob{seg_id, spec, done};
  }));
  return result.get();
}

void ServingEngineImpl::finish_segment_job(ServeId id, ServeFinish why, const std::string& error) {
  auto it = segment_jobs_.find(id);
  if (it == segment_jobs_.end()) return;
  SegmentJob job = std::move(it->second);
  segment_jobs_.erase(it);
  if (why == ServeFinish::kCancelled) {
    job.done->set_value(make_error(ErrorCode::kUnavailable, "the segment's prefill was cancelled (shutting down)"));
    return;
  }
  if (why == ServeFinish::kError) {
    job.done->set_value(make_error(ErrorCode::kInternal, "the segment's prefill failed: ", error));
    return;
  }
  ExtraKeys keys;
  keys.tenant = job.spec.tenant;
  keys.cache_salt = job.spec.cache_salt;
  Result<int32_t> n = kv_->freeze_segment(job.seg_id, job.spec.tokens, keys);
  if (!n.is_ok()) {
    job.done->set_value(make_error(ErrorCode::kInternal, "the segment's KV could not be pinned: ", n.status().message()));
    return;
  }
  publish_stats();  // stats() right after create_segment returns shows the segment
  job.done->set_value(segment_info(*kv_->frozen().find(job.seg_id)));
}

Status ServingEngineImpl::delete_segment(const std::string& id, const std::string& tenant) {
  Status st = Status::ok();
  AKV_RETURN_IF_ERROR(run_on_engine([&] {
    const FrozenSegment* s = kv_->frozen().find(id);
    // Another tenant's segment is as absent as an unknown one.
    st = s == nullptr || s->keys.tenant != tenant ? make_error(ErrorCode::kNotFound, "no segment '", id, "'")
                                                  : kv_->unfreeze_segment(id);
    publish_stats();
  }));
  return st;
}

std::vector<SegmentSpec> ServingEngineImpl::frozen_segment_specs() {
  std::vector<SegmentSpec> out;
  Status st = run_on_engine([&] {
    for (const FrozenSegment* s : kv_->frozen().list()) {
      if (!s->evicted) out.push_back(SegmentSpec{s->tokens, s->keys.tenant, s->keys.cache_salt, s->id});
    }
  });
  (void)st;  // stopped: nothing to save
  return out;
}

std::vector<SegmentInfo> ServingEngineImpl::list_segments(const std::string& tenant) {
  std::vector<SegmentInfo> out;
  Status st = run_on_engine([&] {
    for (const FrozenSegment* s : kv_->frozen().list()) {
      if (s->keys.tenant == tenant) out.push_back(segment_info(*s));
    }
  });
  (void)st;  // stopping: nothing to list
  return out;
}


Result<std::unique_ptr<ServingEngine>> create_serving_engine(const ServingOptions& opts) {
  AKV_ASSIGN_OR_RETURN(auto e, ServingEngineImpl::create(opts));
  return std::unique_ptr<ServingEngine>(std::move(e));
}

const char* serve_finish_name(ServeFinish f) {
  switch (f) {
    case ServeFinish::kStop: return "stop";
    case ServeFinish::kLength: return "length";
    case ServeFinish::kCancelled: return "cancelled";
    case ServeFinish::kError: return "error";
    case ServeFinish::kNone: break;
  }
  return "";
}

}  // namespace agentkv
