#include "adapter/registry.h"

#include <sys/stat.h>

#include "adapter/adapter_identity.h"
#include "adapter/gguf_lora_loader.h"
#include "adapter/peft_loader.h"
#include "format/gguf_cursor.h"  // quoted_name

namespace agentkv {

Status check_adapter_name(const std::string& name) {
  if (name.empty() || name.size() > 128) {
    return make_error(ErrorCode::kInvalidArgument, "adapter name must be 1 to 128 characters");
  }
  for (char ch : name) {
    if (ch <= ' ' || ch >= 0x7f || ch == '=' || ch == ':') {
      return make_error(ErrorCode::kInvalidArgument, "adapter name ", quoted_name(name),
                        " may only hold printable ASCII without spaces, '=' or ':'");
    }
  }
  return Status::ok();
}

std::optional<AdapterKind> adapter_kind_from_name(const std::string& s) {
  for (AdapterKind k : {AdapterKind::kLora, AdapterKind::kAlora, AdapterKind::kIcarus})
    if (s == adapter_kind_name(k)) return k;
  return std::nullopt;
}

Result<Adapter> load_adapter_files(const std::string& path, const ModelSpec& spec, int32_t n_vocab,
                                   std::optional<AdapterKind> kind_override) {
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0) {
    return make_error(ErrorCode::kNotFound, path, ": no such adapter (a PEFT directory or a GGUF LoRA file)");
  }
  if (S_ISDIR(sb.st_mode)) return load_peft_adapter(path, spec, n_vocab, kind_override);
  return load_gguf_lora_adapter(path, spec, n_vocab, kind_override);
}

Status AdapterRegistry::check_name_free(const std::string& name) const {
  if (by_name_.count(name)) {
    return make_error(ErrorCode::kInvalidArgument, "an adapter named ", quoted_name(name),
                      " is already loaded; unload it first or pick another name");
  }
  return Status::ok();
}

Result<std::shared_ptr<const Adapter>> AdapterRegistry::load(const std::string& name, const std::string& path,
                                                             std::optional<AdapterKind> kind_override,
                                                             const ModelSpec& spec, int32_t n_vocab) {
  AKV_RETURN_IF_ERROR(check_adapter_name(name));
  {
    std::lock_guard<std::mutex> lock(mu_);
    AKV_RETURN_IF_ERROR(check_name_free(name));  // fail fast before reading files
  }
  AKV_ASSIGN_OR_RETURN(Adapter a, load_adapter_files(path, spec, n_vocab, kind_override));
  a.name = name;
  return add(std::move(a));
}

Result<std::shared_ptr<const Adapter>> AdapterRegistry::add(Adapter adapter) {
  AKV_RETURN_IF_ERROR(check_adapter_name(adapter.name));
  adapter.v_a_id = adapter_v_a_id(adapter);
  auto ptr = std::make_shared<const Adapter>(std::move(adapter));
  std::lock_guard<std::mutex> lock(mu_);
  AKV_RETURN_IF_ERROR(check_name_free(ptr->name));  // another thread may have won the race
  by_name_.emplace(ptr->name, ptr);
  return std::shared_ptr<const Adapter>(ptr);
}

Status AdapterRegistry::unload(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (by_name_.erase(name) == 0) {
    return make_error(ErrorCode::kNotFound, "no adapter named ", quoted_name(name), " is loaded");
  }
  return Status::ok();
}

std::shared_ptr<const Adapter> AdapterRegistry::find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<AdapterInfo> AdapterRegistry::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<AdapterInfo> out;
  for (const auto& [name, a] : by_name_) {
    std::vector<std::string> peers = peers_locked(*a);
    out.push_back({name, a->kind, a->id, a->rank, a->source, peers.empty() ? std::string() : a->v_a_id, std::move(peers)});
  }
  return out;
}

std::vector<AdapterRegistry::Brief> AdapterRegistry::briefs() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Brief> out;
  for (const auto& [name, a] : by_name_) out.push_back({name, a->kind, a->id});
  return out;
}

std::vector<std::string> AdapterRegistry::peers_locked(const Adapter& a) const {
  std::vector<std::string> out;
  if (a.v_a_id.empty()) return out;
  for (const auto& [name, b] : by_name_) {
    if (b.get() == &a || b->v_a_id != a.v_a_id) continue;
    if (adapter_v_a_equal(a, *b)) out.push_back(name);
  }
  return out;
}

int32_t AdapterRegistry::shared_a_peers(const Adapter& a) const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int32_t>(peers_locked(a).size());
}

}  // namespace agentkv
