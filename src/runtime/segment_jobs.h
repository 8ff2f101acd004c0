// Frozen segments' prefills (SparseX §4; POST /v1/segments): a segment is
// created by a prefill request whose blocks are pinned when it finishes.
// This holds the prefills under way, names new segments, and pins a
// prefill's blocks (or reports why not) to the create_segment waiting on
// it. Engine thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <unordered_map>

#include "agentkv/serving.h"
#include "kv/kv_manager.h"
#include "util/status.h"

namespace agentkv {

// What the API shows of a frozen segment.
SegmentInfo segment_info(const FrozenSegment& s);

// A segment id as the API takes it: 1-64 of A-Z, a-z, 0-9, '.', '_', '-'.
bool valid_segment_id(const std::string& id);

class SegmentJobs {
 public:
  using Done = std::shared_ptr<std::promise<Result<SegmentInfo>>>;

  // A new segment's id: `wanted` unless a segment or a prefill under way has
  // it (a restored "seg-<n>" moves the engine's own names past it), or the
  // next free "seg-<n>" when `wanted` is empty.
  Result<std::string> name(const std::string& wanted, const FrozenSegments& frozen);
  // Request `prefill` prefills segment `seg_id` of `spec`; `done` waits for it.
  void add(ServeId prefill, std::string seg_id, SegmentSpec spec, Done done) {
    jobs_[prefill] = Job{std::move(seg_id), std::move(spec), std::move(done)};
  }
  // Request `id` is finishing, its blocks still held. When it was a
  // segment's prefill, its blocks are pinned in `kv` (unless it ended
  // cancelled or in error), `pinned` runs, and its create_segment gets the
  // segment or the reason there is none.
  void finish(ServeId id, ServeFinish why, const std::string& error, KvManager& kv,
              const std::function<void()>& pinned);

 private:
  struct Job {
    std::string seg_id;
    SegmentSpec spec;
    Done done;
  };
  std::unordered_map<ServeId, Job> jobs_;  // by prefill request
  uint64_t next_ = 1;                      // the next "seg-<n>"
};

}  // namespace agentkv
