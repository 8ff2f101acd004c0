#include "model/arch.h"

#include <array>

namespace agentkv {

namespace {
constexpr std::array<ArchInfo, 5> kArchs = {{
    {Arch::kLlama, "llama", RopeStyle::kNormal, false, false},
    {Arch::kMistral, "mistral", RopeStyle::kNormal, false, false},
    {Arch::kQwen2, "qwen2", RopeStyle::kNeox, true, false},
    {Arch::kQwen3, "qwen3", RopeStyle::kNeox, false, true},
    {Arch::kGemma3, "gemma3", RopeStyle::kNeox, false, true, true, true, FfnAct::kGeluTanh, true},
}};
}  // namespace

std::optional<ArchInfo> arch_lookup(std::string_view name) {
  for (const auto& a : kArchs)
    if (a.name == name) return a;
  return std::nullopt;
}

namespace tn {
std::string blk(int layer, std::string_view suffix) {
  return "blk." + std::to_string(layer) + "." + std::string(suffix);
}
}  // namespace tn

}  // namespace agentkv
