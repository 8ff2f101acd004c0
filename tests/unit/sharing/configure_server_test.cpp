// What each scheme sets up at server start (SharingScheme::configure_server):
// its defaults checked against the model, and the KV components it declares.
// The engine sizes the KV budget from exactly these.
#include <gtest/gtest.h>

#include <string>

#include "agentkv/serving.h"
#include "sharing/scheme.h"

namespace agentkv {
namespace {

constexpr int32_t kLayers = 30, kDModel = 576;

// Every single scheme's configure_server, in the engine's order.
Status configure(const ServingOptions& o, KvSharingParams* d, KvComponentRegistry* r) {
  const ServerSchemeContext c{&o, kLayers, kDModel};
  for (const char* name : sharing_scheme_names()) {
    Status s = sharing_scheme_get(name)->configure_server(c, d, r);
    if (!s.is_ok()) return s;
  }
  return Status::ok();
}

TEST(ConfigureServer, DefaultServerKeepsOwnerTagsAndInfluenceOnly) {
  ServingOptions o;  // captures on request, no profiles, snapshots on
  KvSharingParams d;
  KvComponentRegistry r;
  ASSERT_TRUE(configure(o, &d, &r).is_ok());
  EXPECT_TRUE(r.declared(ComponentRole::kOwnerTags));
  ASSERT_TRUE(r.declared(ComponentRole::kCaptureInfluence));
  EXPECT_FALSE(r.decl(ComponentRole::kCaptureInfluence)->every_request);
  // No layer to keep a hidden state at without a relay l_start or critical layers.
  EXPECT_FALSE(r.declared(ComponentRole::kCaptureHidden));
  EXPECT_FALSE(r.declared(ComponentRole::kOwnerHidden));
  EXPECT_EQ(r.bytes_per_block(16), 2 * 16 * (4 + 4));
  EXPECT_TRUE(d.empty());
}

TEST(ConfigureServer, LayersGiveSnapshotsAtThem) {
  ServingOptions o;
  o.relay_capture = "all";
  KvSharingParams d;
  d.l_start = 2, d.l_det = 6, d.l_end = 20;
  d.critical_layers = std::vector<int32_t>{9, 4};
  KvComponentRegistry r;
  ASSERT_TRUE(configure(o, &d, &r).is_ok());
  EXPECT_TRUE(r.decl(ComponentRole::kCaptureInfluence)->every_request);
  EXPECT_EQ(r.decl(ComponentRole::kCaptureHidden)->layer, 2);
  EXPECT_EQ(r.decl(ComponentRole::kOwnerHidden)->layer, 4);  // the first critical layer
  EXPECT_EQ(r.decl(ComponentRole::kOwnerHidden)->width, kDModel);
}

TEST(ConfigureServer, OptionsTurnComponentsOff) {
  ServingOptions o;
  o.relay_capture = "off";
  o.relay_snapshots = false;
  o.droidspeak_snapshots = false;
  KvSharingParams d;
  d.l_start = 2, d.l_det = 6, d.l_end = 20;
  d.critical_layers = std::vector<int32_t>{4};
  KvComponentRegistry r;
  ASSERT_TRUE(configure(o, &d, &r).is_ok());
  EXPECT_FALSE(r.declared(ComponentRole::kCaptureInfluence));
  EXPECT_FALSE(r.declared(ComponentRole::kCaptureHidden));
  EXPECT_FALSE(r.declared(ComponentRole::kOwnerHidden));
  EXPECT_TRUE(r.declared(ComponentRole::kOwnerTags));
  // Layer 0 first: recompute rows start at the embedding, nothing to keep.
  o.droidspeak_snapshots = true;
  d.critical_layers = std::vector<int32_t>{0, 4};
  KvComponentRegistry r2;
  ASSERT_TRUE(configure(o, &d, &r2).is_ok());
  EXPECT_FALSE(r2.declared(ComponentRole::kOwnerHidden));
}

TEST(ConfigureServer, BadDefaultsNameTheirOption) {
  ServingOptions o;
  o.relay_capture = "sometimes";
  KvSharingParams d;
  KvComponentRegistry r;
  Status s = configure(o, &d, &r);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("--relay-capture"), std::string::npos) << s.message();

  ServingOptions o2;
  KvSharingParams d2;
  d2.critical_layers = std::vector<int32_t>{4, 30};  // the model has 30
  KvComponentRegistry r2;
  s = configure(o2, &d2, &r2);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("--droidspeak-layers"), std::string::npos) << s.message();

  KvSharingParams d3;
  d3.l_start = 8, d3.l_det = 4, d3.l_end = 20;  // l_det before l_start
  KvComponentRegistry r3;
  s = configure(o2, &d3, &r3);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("relay defaults"), std::string::npos) << s.message();
}

TEST(ConfigureServer, AMissingProfileIsAnError) {
  ServingOptions o;
  o.model_path = "/nonexistent/model.gguf";
  o.relay_profile = "/nonexistent/profile.relay.json";
  KvSharingParams d;
  KvComponentRegistry r;
  EXPECT_FALSE(configure(o, &d, &r).is_ok());
}

}  // namespace
}  // namespace agentkv
