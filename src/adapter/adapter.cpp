#include "adapter/adapter.h"

namespace agentkv {

const char* adapter_kind_name(AdapterKind k) {
  switch (k) {
    case AdapterKind::kLora: return "lora";
    case AdapterKind::kAlora: return "alora";
    case AdapterKind::kIcarus: return "icarus";
  }
  return "?";
}

Result<AdapterKind> adapter_kind_from_name(std::string_view name) {
  if (name == "lora") return AdapterKind::kLora;
  if (name == "alora") return AdapterKind::kAlora;
  if (name == "icarus") return AdapterKind::kIcarus;
  return make_error(ErrorCode::kInvalidArgument, "unknown adapter kind '", name, "' (use lora, alora or icarus)");
}

}  // namespace agentkv
