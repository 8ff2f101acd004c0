// The adapters a server knows, by API model name. Thread-safe: HTTP threads
// load and unload while the engine thread looks adapters up. An Adapter is
// immutable once registered and shared by pointer, so a request that found
// one keeps it alive through an unload.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "adapter/adapter.h"
#include "model/model_spec.h"
#include "util/status.h"

namespace agentkv {

struct AdapterInfo {
  std::string name;
  AdapterKind kind = AdapterKind::kLora;
  std::string id;
  int32_t rank = 0;
  std::string source;
  // Its shared-A group (LRAgent): the v_proj A id, and the other loaded
  // adapters with bit-identical v_proj A, by name. Empty: in no group.
  std::string v_a_id;
  std::vector<std::string> shared_a_with;
};

class AdapterRegistry {
 public:
  // path: a PEFT directory (adapter_config.json + adapter_model.safetensors)
  // or a llama.cpp GGUF LoRA file. The kind comes from the files (alora when
  // they carry invocation tokens, else lora) unless kind_override is set;
  // icarus can only come from the override, since neither format can say it.
  // Errors: kAlreadyExists-like kInvalidArgument for a taken name, or the
  // loader's error. The files are read outside the lock.
  Result<std::shared_ptr<const Adapter>> load(const std::string& name, const std::string& path,
                                              std::optional<AdapterKind> kind_override, const ModelSpec& spec,
                                              int32_t n_vocab);
  // Adds an adapter built elsewhere (tests, synth); same name rules.
  Result<std::shared_ptr<const Adapter>> add(Adapter adapter);
  Status unload(const std::string& name);  // kNotFound for an unknown name
  std::shared_ptr<const Adapter> find(const std::string& name) const;  // null if unknown
  std::vector<AdapterInfo> list() const;                              // sorted by name
  // Name, kind and content id of each, sorted by name: list() without the
  // shared-A groups (which compare weights), for the engine thread.
  struct Brief {
    std::string name;
    AdapterKind kind = AdapterKind::kLora;
    std::string id;
  };
  std::vector<Brief> briefs() const;
  // Loaded adapters, `a` aside, whose v_proj A is bit for bit a's (its
  // shared-A group's other members; a need not be loaded).
  int32_t shared_a_peers(const Adapter& a) const;

 private:
  Status check_name_free(const std::string& name) const;  // caller holds mu_
  std::vector<std::string> peers_locked(const Adapter& a) const;

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const Adapter>> by_name_;
};

// Loads a PEFT directory or GGUF file (picked by whether path is a directory),
// without registering it.
Result<Adapter> load_adapter_files(const std::string& path, const ModelSpec& spec, int32_t n_vocab,
                                   std::optional<AdapterKind> kind_override);

// Adapter names are API model names: 1..128 printable ASCII characters
// without spaces, '=' or ':'.
Status check_adapter_name(const std::string& name);

std::optional<AdapterKind> adapter_kind_from_name(const std::string& s);  // "lora", "alora", "icarus"


}  // namespace agentkv
