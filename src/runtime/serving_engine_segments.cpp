// The frozen segment pool's API on the serving engine (SparseX §4): create
// (a prefill whose blocks are then pinned: segment_jobs.h), delete, list,
// and the specs that serve --segment-dir saves. The KV manager's
// FrozenSegments does the pinning.
#include "runtime/serving_engine_impl.h"

namespace agentkv {

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
    Result<std::string> seg_id = segment_jobs_.name(spec.id, kv_->frozen());
    if (!seg_id.is_ok()) {
      done->set_value(seg_id.status());
      return;
    }
    Result<ServeId> id = submit(std::move(req), [](ServeEvent&&) {});
    if (!id.is_ok()) {
      done->set_value(id.status());
      return;
    }
    segment_jobs_.add(*id, std::move(*seg_id), spec, done);
  }));
  return result.get();
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
