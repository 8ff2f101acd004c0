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

}  // namespace agentkv
