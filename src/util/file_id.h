// A file's content identity: hex XXH3-128 of its bytes. The relay profile
// names the model it was measured on this way, so a profile for another
// GGUF (another model, or the same one quantized otherwise) is refused.
#pragma once

#include <string>

#include "util/status.h"

namespace agentkv {

// kIo when the file cannot be read.
Result<std::string> file_content_id(const std::string& path);

}  // namespace agentkv
