#include "kv/component_registry.h"

namespace agentkv {

Status KvComponentRegistry::declare(const ComponentDecl& d) {
  const bool hidden = d.role == ComponentRole::kCaptureHidden || d.role == ComponentRole::kOwnerHidden;
  if (d.width < 1) return make_error(ErrorCode::kInvalidArgument, "a KV component needs a width >= 1");
  if (hidden != (d.layer > 0)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "a hidden-state KV component needs the layer it enters (> 0), and only it takes one");
  }
  std::optional<ComponentDecl>& slot = decls_[index(d.role)];
  if (slot) return make_error(ErrorCode::kInvalidArgument, "a KV component role is declared twice");
  slot = d;
  return Status::ok();
}

Status KvComponentRegistry::declare_pool(const PoolDecl& d) {
  if (d.width < 1 || d.blocks_per_kv_block < 1) {
    return make_error(ErrorCode::kInvalidArgument,
                      "a pooled KV component needs a width and a block count >= 1");
  }
  if (pool_ && (pool_->width != d.width || pool_->blocks_per_kv_block != d.blocks_per_kv_block)) {
    return make_error(ErrorCode::kInvalidArgument, "the LR pool is declared twice with different sizes");
  }
  pool_ = d;
  return Status::ok();
}

int64_t KvComponentRegistry::bytes_per_block(int32_t block_size) const {
  int64_t n = 0;
  for (const std::optional<ComponentDecl>& d : decls_) {
    if (d) n += int64_t{block_size} * (d->width * int64_t{sizeof(float)} + int64_t{sizeof(uint32_t)});
  }
  return n;
}

Status KvComponentRegistry::create_all(int64_t n_blocks, int32_t block_size) {
  for (size_t i = 0; i < decls_.size(); ++i) {
    if (!decls_[i]) continue;
    AKV_ASSIGN_OR_RETURN(KvComponent c, KvComponent::create(n_blocks, block_size, decls_[i]->width));
    made_[i] = std::make_unique<KvComponent>(std::move(c));
  }
  return Status::ok();
}

}  // namespace agentkv
