// Profiles found by model id (sharing/profile_dir.h): the file whose format
// and model.id match, in name order; everything else passed over.
#include "sharing/profile_dir.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "../../source_dir.h"
#include "test_dir.h"
#include "sharing/droidspeak_profile.h"
#include "sharing/relay_profile.h"

namespace agentkv {
namespace {

class ProfileDir : public ::testing::Test {
 protected:
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  std::string profile(const char* format, const char* id) {
    return std::string("{\"format\": \"") + format + "\", \"version\": 1, \"model\": {\"id\": \"" + id +
           "\"}}";
  }
  std::string find(std::string_view suffix, const char* format, std::string_view id) {
    return find_profile(dir_.string(), suffix, format, id);
  }
  TestDir tmp_{"akv_profile_dir_"};
  const std::filesystem::path& dir_ = tmp_.path();
};

TEST_F(ProfileDir, FindsTheFileOfThisModelAndFormat) {
  write("a.relay.json", profile(kRelayProfileFormat, "other"));
  write("b.relay.json", profile(kRelayProfileFormat, "m1"));
  write("c.relay.json", profile(kRelayProfileFormat, "m1"));  // a later name loses
  write("a.droidspeak.json", profile(kDroidspeakProfileFormat, "m1"));
  EXPECT_EQ(find(kRelayProfileSuffix, kRelayProfileFormat, "m1"), (dir_ / "b.relay.json").string());
  EXPECT_EQ(find(kDroidspeakProfileSuffix, kDroidspeakProfileFormat, "m1"),
            (dir_ / "a.droidspeak.json").string());
  EXPECT_EQ(find(kRelayProfileSuffix, kRelayProfileFormat, "m2"), "");
}

TEST_F(ProfileDir, PassesOverWhatIsNotAProfileOfIt) {
  write("x.relay.json", "not json");
  write("y.relay.json", "[1, 2]");
  write("z.relay.json", "{\"format\": \"agentkv-relay-profile\", \"model\": {\"id\": 7}}");
  // The right model under the other kind's format, or the other suffix.
  write("w.relay.json", profile(kDroidspeakProfileFormat, "m1"));
  write("m1.json", profile(kRelayProfileFormat, "m1"));
  std::filesystem::create_directories(dir_ / "d.relay.json");  // a folder
  EXPECT_EQ(find(kRelayProfileSuffix, kRelayProfileFormat, "m1"), "");
  EXPECT_EQ(find_profile((dir_ / "absent").string(), kRelayProfileSuffix, kRelayProfileFormat, "m1"), "");
  EXPECT_EQ(find_profile("", kRelayProfileSuffix, kRelayProfileFormat, "m1"), "");
}

// The committed profiles are found for the model they name, and load.
TEST(ProfileDirCommitted, TheDefaultModelsProfilesAreFound) {
  const std::string dir = test::source_dir() + "/profiles";
  const std::string id = "1dff70ef9e211d0ab8951aa641e75aa1";  // profiles/*.json's model.id: SmolLM2-135M Q4_1
  const std::string relay = find_profile(dir, kRelayProfileSuffix, kRelayProfileFormat, id);
  const std::string ds = find_profile(dir, kDroidspeakProfileSuffix, kDroidspeakProfileFormat, id);
  ASSERT_NE(relay, "");
  ASSERT_NE(ds, "");
  EXPECT_TRUE(load_relay_profile(relay, id, 30).is_ok());
  EXPECT_TRUE(load_droidspeak_profile(ds, id, 30).is_ok());
}

}  // namespace
}  // namespace agentkv
