// The scheme parameters' flag table (sharing/param_flags.h) against the
// field table (kKvSharingFields): a field a scheme gains without a flag, or a
// flag for no field, fails here.
#include "sharing/param_flags.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <string_view>

#include "agentkv/kv_sharing_params.h"

namespace agentkv {
namespace {

TEST(KvSharingFlags, OneFlagPerFieldInItsOrder) {
  const std::vector<KvSharingFlag>& flags = kv_sharing_flags();
  ASSERT_EQ(flags.size(), std::size(kKvSharingFields));
  std::set<std::string> seen;
  for (size_t i = 0; i < flags.size(); ++i) {
    EXPECT_EQ(std::string_view(flags[i].field), kKvSharingFields[i].name);
    EXPECT_EQ(std::string_view(flags[i].flag).substr(0, 2), "--") << flags[i].flag;
    EXPECT_TRUE(seen.insert(flags[i].flag).second) << flags[i].flag << " twice";
    EXPECT_LE(flags[i].lo, flags[i].hi) << flags[i].flag;
    EXPECT_FALSE(flags[i].help.empty()) << flags[i].flag;
  }
}

TEST(KvSharingFlags, HelpNamesTheSchemeDefaults) {
  for (const KvSharingFlag& f : kv_sharing_flags()) {
    if (std::string_view(f.field) == "recompute_tokens") {
      EXPECT_NE(f.help.find("(default 64)"), std::string::npos);
    }
    if (std::string_view(f.field) == "dev_threshold") {
      EXPECT_NE(f.help.find("(default 1.5)"), std::string::npos);
    }
  }
}

TEST(KvSharingFlags, LayerLists) {
  std::vector<int32_t> v;
  ASSERT_TRUE(parse_layer_list("0,3,7", 29, &v));
  EXPECT_EQ(v, (std::vector<int32_t>{0, 3, 7}));
  ASSERT_TRUE(parse_layer_list("12", 29, &v));
  EXPECT_EQ(v, (std::vector<int32_t>{12}));
  for (const char* bad : {"", ",", "1,", ",1", "1,,2", "-1", "a", "1;2", "30", "12345"}) {
    EXPECT_FALSE(parse_layer_list(bad, 29, &v)) << bad;
  }
}

}  // namespace
}  // namespace agentkv
