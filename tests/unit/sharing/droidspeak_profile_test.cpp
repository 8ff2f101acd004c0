// DroidSpeak's critical-layer choice and its profile file (sharing/
// droidspeak_profile.h), and the droidspeak scheme's parameter checks.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "sharing/droidspeak_profile.h"
#include "sharing/scheme.h"

namespace agentkv {
namespace {

TEST(DroidspeakProfile, CriticalLayersAreTheMostSensitiveFraction) {
  const std::vector<double> s = {0.5, 0.1, 0.9, 0.2, 0.9, 0.05};
  EXPECT_EQ(droidspeak_critical_layers(s, 1.0 / 3.0), (std::vector<int32_t>{2, 4}));
  EXPECT_EQ(droidspeak_critical_layers(s, 0.5), (std::vector<int32_t>{0, 2, 4}));  // ceil(3)
  EXPECT_EQ(droidspeak_critical_layers(s, 0.15), (std::vector<int32_t>{2}));       // tie 2/4: the lower layer
  EXPECT_EQ(droidspeak_critical_layers(s, 1.0).size(), 6u);
}

TEST(DroidspeakProfile, SavesAndLoadsAndRefusesBadFiles) {
  const std::string dir = ::testing::TempDir();
  DroidspeakProfile p;
  p.model_id = "m1";
  p.model_name = "tiny";
  p.n_layers = 4;
  p.sensitivity = {0.1, 0.4, 0.2, 0.3};
  p.critical_layers = {1, 3};
  p.fraction = 0.5;
  const std::string path = dir + "/ds.json";
  ASSERT_TRUE(save_droidspeak_profile(p, path).is_ok());
  auto back = load_droidspeak_profile(path, "m1", 4);
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->critical_layers, p.critical_layers);
  EXPECT_EQ(back->sensitivity, p.sensitivity);
  auto err = [&](const std::string& text, const std::string& model, int32_t layers) {
    const std::string f = dir + "/bad.json";
    std::ofstream(f) << text;
    auto r = load_droidspeak_profile(f, model, layers);
    return r.is_ok() ? std::string() : r.status().message();
  };
  EXPECT_NE(load_droidspeak_profile(dir + "/missing.json", "m1", 4).status().message().find("cannot read"),
            std::string::npos);
  EXPECT_NE(err("{\"format\": ", "m1", 4).find("not JSON"), std::string::npos);
  const std::string head = R"({"format": "agentkv-droidspeak-profile", "version": 1, "model": {"id": "m1"}, )";
  EXPECT_NE(err(head + R"("critical_layers": [1]})", "m2", 4).find("another model"), std::string::npos);
  EXPECT_NE(err(head + R"("critical_layers": [1, 4]})", "m1", 4).find("out of range"), std::string::npos);
  EXPECT_NE(err(head + R"("critical_layers": [2, 2]})", "m1", 4).find("twice"), std::string::npos);
  EXPECT_NE(err(head + R"("critical_layers": []})", "m1", 4).find("non-empty"), std::string::npos);
  EXPECT_TRUE(err(head + R"("critical_layers": [3, 0]})", "m1", 4).empty());
}

TEST(DroidspeakScheme, ParametersAreChecked) {
  const SharingScheme* s = sharing_scheme_get("droidspeak");
  ASSERT_NE(s, nullptr);
  KvSharingParams p;
  EXPECT_TRUE(s->check_params(p).is_ok());
  EXPECT_FALSE(s->check_model(p, 30).is_ok());  // no critical layers at all
  p.critical_layers = std::vector<int32_t>{0, 29};
  EXPECT_TRUE(s->check_params(p).is_ok());
  EXPECT_TRUE(s->check_model(p, 30).is_ok());
  EXPECT_FALSE(s->check_model(p, 29).is_ok());
  p.critical_layers = std::vector<int32_t>{3, 3};
  EXPECT_FALSE(s->check_params(p).is_ok());
  p.critical_layers = std::vector<int32_t>{-1};
  EXPECT_FALSE(s->check_params(p).is_ok());
  KvSharingParams other;
  other.ratio = 0.1;
  EXPECT_FALSE(s->check_params(other).is_ok());
  // Other schemes refuse critical_layers.
  KvSharingParams cl;
  cl.critical_layers = std::vector<int32_t>{1};
  for (const char* name : {"none", "cacheblend", "full", "lragent-base"}) {
    EXPECT_FALSE(sharing_scheme_get(name)->check_params(cl).is_ok()) << name;
  }
}

}  // namespace
}  // namespace agentkv
