// The KV components the schemes declare at server start (docs/design.md §2): each
// scheme says what it keeps per token slot beside the K/V, for which of the
// engine's features, and the engine adds up what is declared to size the KV
// budget and creates each component once. The engine knows a component by
// the feature it serves (its role), never by the scheme that asked for it.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>

#include "kv/kv_component.h"
#include "util/status.h"

namespace agentkv {

// The engine features a component serves.
enum class ComponentRole : int32_t {
  // Captures for segment reuse: a per-token statistic the attention op sums
  // while a request decodes (the influence score), and the hidden state
  // entering a layer, so reused tokens resume there.
  kCaptureInfluence,
  kCaptureHidden,
  // Owner tags: per slot, the agents that processed the token (bits of one
  // float); and the hidden state entering a layer kept by the agent that
  // processed it, where rows that redo another agent's tokens start.
  kOwnerTags,
  kOwnerHidden,
};
inline constexpr int32_t kComponentRoles = 4;

struct ComponentDecl {
  ComponentRole role = ComponentRole::kCaptureInfluence;
  int32_t width = 1;   // floats per slot
  int32_t layer = -1;  // a hidden state: the layer it enters (> 0); else -1
  // Captures only: taken for every request, not only for the requests whose
  // scheme reads them back.
  bool every_request = false;
};

// A component with blocks of its own: the LR cache (LRAgent), whose rows
// have their own lineage, so its own KvManager over a pool of
// blocks_per_kv_block blocks per K/V block of the budget. Each block is
// [n_layers][block_size][width] values in the KV element type
// (kv/lr_storage.h).
struct PoolDecl {
  int32_t width = 0;  // values per token and layer: the largest v_proj rank held
  int32_t blocks_per_kv_block = 0;
};

class KvComponentRegistry {
 public:
  // kInvalidArgument for a width < 1, a hidden state without a layer > 0, or
  // a role declared twice.
  Status declare(const ComponentDecl& d);
  bool declared(ComponentRole r) const { return decls_[index(r)].has_value(); }
  // The declaration of `r`; nullopt when none declared it.
  const std::optional<ComponentDecl>& decl(ComponentRole r) const { return decls_[index(r)]; }
  // The LR pool. Declared again with the same fields is no error (two
  // schemes use it); with other fields, or non-positive ones,
  // kInvalidArgument.
  Status declare_pool(const PoolDecl& d);
  const std::optional<PoolDecl>& pool() const { return pool_; }
  // Bytes one KV block of `block_size` slots adds in all declared slot
  // components (the pool's bytes are its own: PoolDecl).
  int64_t bytes_per_block(int32_t block_size) const;
  // Creates every declared component for a pool of n_blocks blocks.
  Status create_all(int64_t n_blocks, int32_t block_size);
  // The created component of `r`; null when it was not declared (or before
  // create_all).
  KvComponent* get(ComponentRole r) const { return made_[index(r)].get(); }

 private:
  static size_t index(ComponentRole r) { return static_cast<size_t>(r); }
  std::array<std::optional<ComponentDecl>, kComponentRoles> decls_;
  std::array<std::unique_ptr<KvComponent>, kComponentRoles> made_;
  std::optional<PoolDecl> pool_;
};

}  // namespace agentkv
