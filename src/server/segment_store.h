// serve --segment-dir DIR: the frozen segments (SparseX §4's knowledge base)
// outlive a restart. At shutdown, after the drain, every frozen segment's id,
// namespace and token ids go to DIR/segments.json (written to a temporary
// file, then renamed); at start, before the server reports ready, each is
// prefilled and pinned again under its old id. What is saved is the tokens,
// not the KV: the kernels are batch-invariant, so the recomputed blocks are
// the ones a first computation wrote, and no KV layout or dtype is baked
// into the file.
//
// The file names the model it was saved for (file_content_id of the GGUF).
// A file for another model, an unreadable or malformed file, and a segment
// that cannot be restored (bad entry, vocabulary, too long for the pool) are
// warnings: the segments concerned are skipped and nothing else fails.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "agentkv/serving.h"
#include "util/status.h"

namespace agentkv::server {

inline constexpr const char* kSegmentFileName = "segments.json";

// kInvalidArgument when dir is not an existing, writable directory: checked
// before the model loads, so a typo fails at once.
Status check_segment_dir(const std::string& dir);

// Writes dir/segments.json. kIo when it cannot be written.
Status save_segments(const std::string& dir, const std::string& model_id, const std::vector<SegmentSpec>& segs);

// The segments of dir/segments.json saved for model_id, each entry checked
// for shape (not against the vocabulary: create_segment does that). A missing
// file is no segments and no warning; every problem appends one line to
// *warnings.
std::vector<SegmentSpec> load_segments(const std::string& dir, const std::string& model_id,
                                       std::vector<std::string>* warnings);

// load_segments' parser, on the file's text (fuzz/fuzz_segment_file.cpp).
// Warnings here do not name the file.
std::vector<SegmentSpec> parse_segment_file(std::string_view text, const std::string& model_id,
                                            std::vector<std::string>* warnings);

}  // namespace agentkv::server
