// Where an adapter loaded at run time (POST /v1/load_lora_adapter) may come
// from: only inside the server's --lora-dir.
//
// The path a client sends is untrusted. Without this, a client could make
// the server open any file it can read (/etc/passwd) or block on a device
// (/dev/zero, a FIFO). A request's lora_path is taken relative to lora_dir
// (an absolute one must lie inside it), may not contain a ".." component,
// and is resolved with realpath(3), so a symlink that leads out of lora_dir
// is refused as well. It must be a regular file (a GGUF LoRA) or a directory
// (PEFT) whose entries also resolve inside lora_dir and are regular files or
// directories. The engine is then handed the resolved path.
//
// Not covered: a file swapped between this check and the load (lora_dir is
// the operator's directory; whoever can write there chooses the adapters).
#pragma once

#include <string>

#include "server/api_error.h"
#include "util/status.h"

namespace agentkv::server {

// `dir` resolved (realpath) for ServerConfig::lora_dir; an error when it does
// not exist or is not a directory.
Result<std::string> canonical_lora_dir(const std::string& dir);

// The resolved path to load for a request's lora_path, or the answer:
// 400 (param lora_path) for a path outside lora_dir, with "..", or not a
// regular file or directory; 404 adapter_not_found when nothing is there.
// No message includes anything read from a file. `lora_dir` is canonical.
ApiResult<std::string> confine_adapter_path(const std::string& lora_dir, const std::string& requested);

}  // namespace agentkv::server
