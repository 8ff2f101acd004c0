// Which models each scheme lets read another model's blocks: what KV cache
// events announce aliases from (runtime/kv_event_source.h).
#include <gtest/gtest.h>

#include <optional>

#include "sharing/scheme.h"

namespace agentkv {
namespace {

constexpr std::optional<AdapterKind> kBase = std::nullopt;

bool reads(const char* scheme, std::optional<AdapterKind> kind, std::string_view tag) {
  const SharingScheme* s = sharing_scheme_get(scheme);
  EXPECT_NE(s, nullptr) << scheme;
  return s != nullptr && s->reads_lineage(kind, tag);
}

TEST(ReadsLineage, AloraAndIcarusReadTheBaseLineageForTheirOwnKind) {
  EXPECT_TRUE(reads("alora", AdapterKind::kAlora, ""));
  EXPECT_FALSE(reads("alora", AdapterKind::kLora, ""));
  EXPECT_FALSE(reads("alora", AdapterKind::kIcarus, ""));
  EXPECT_TRUE(reads("icarus", AdapterKind::kIcarus, ""));
  EXPECT_FALSE(reads("icarus", AdapterKind::kAlora, ""));
  // Under none, no adapter reads the base's blocks.
  for (AdapterKind k : {AdapterKind::kLora, AdapterKind::kAlora, AdapterKind::kIcarus}) EXPECT_FALSE(reads("none", k, ""));
}

TEST(ReadsLineage, SharedKvSchemesLetTheBaseAndPlainLorasReadTheirTag) {
  for (const char* scheme : {"full", "droidspeak", "lragent-base", "lragent-baselr"}) {
    const std::string tag = std::string(scheme).starts_with("lragent") ? "lragent" : scheme;
    EXPECT_TRUE(reads(scheme, kBase, tag)) << scheme;
    EXPECT_TRUE(reads(scheme, AdapterKind::kLora, tag)) << scheme;
    EXPECT_FALSE(reads(scheme, AdapterKind::kAlora, tag)) << scheme;  // they keep their own rules
    EXPECT_FALSE(reads(scheme, AdapterKind::kIcarus, tag)) << scheme;
    EXPECT_FALSE(reads(scheme, AdapterKind::kLora, "other")) << scheme;
    EXPECT_FALSE(reads(scheme, AdapterKind::kLora, "")) << scheme;
  }
}

}  // namespace
}  // namespace agentkv
