// Per-model defaults of the schemes' parameters (sharing/scheme_defaults.h):
// the file is checked before a server starts (format, model id, schemes and
// their own parameters), and a request's parameters resolve as request >
// server options > the file's entry for its scheme > the built-in default.
#include "sharing/scheme_defaults.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "sharing/profile_dir.h"
#include "sharing/scheme.h"
#include "test_dir.h"

namespace agentkv {
namespace {

class SchemeDefaultsFile : public ::testing::Test {
 protected:
  Result<SchemeDefaults> load(const std::string& schemes, const char* id = "m1",
                              const char* format = kSchemeDefaultsFormat) {
    std::ofstream(path_) << "{\"format\": \"" << format << "\", \"version\": 1, \"model\": {\"id\": \"" << id
                         << "\"}, \"schemes\": " << schemes << "}";
    return load_scheme_defaults(path_.string(), "m1");
  }
  std::string error(const std::string& schemes, const char* id = "m1",
                    const char* format = kSchemeDefaultsFormat) {
    Result<SchemeDefaults> r = load(schemes, id, format);
    EXPECT_FALSE(r.is_ok()) << schemes;
    return r.is_ok() ? "" : r.status().message();
  }
  // A folder of its own: IsFoundByModelId searches it.
  TestDir tmp_{"akv_scheme_defaults_"};
  const std::filesystem::path& dir_ = tmp_.path();
  const std::filesystem::path path_ = dir_ / ("m" + std::string(kSchemeDefaultsSuffix));
};

TEST_F(SchemeDefaultsFile, ReadsEachSchemesOwnParameters) {
  Result<SchemeDefaults> d = load(
      R"({"epic": {"recompute_tokens": 32}, "cacheblend": {"ratio": 0.3, "check_layer": 2},
          "sparsex": {"ratio": 0.5, "boundary_layer": 0}, "relay": {"prefix_tokens": 16, "dev_threshold": 1.2}})");
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  ASSERT_EQ(d->size(), 4u);
  EXPECT_EQ(d->at("epic").recompute_tokens, 32);
  EXPECT_EQ(d->at("cacheblend").ratio, 0.3);
  EXPECT_EQ(d->at("cacheblend").check_layer, 2);
  EXPECT_EQ(d->at("sparsex").ratio, 0.5);
  EXPECT_EQ(d->at("sparsex").boundary_layer, 0);
  EXPECT_FALSE(d->at("sparsex").check_layer.has_value());
  EXPECT_EQ(d->at("relay").prefix_tokens, 16);
  EXPECT_EQ(d->at("relay").dev_threshold, 1.2);
  EXPECT_TRUE(load("{}").is_ok());  // no entry: the built-in defaults
}

TEST_F(SchemeDefaultsFile, RefusesWhatItCannotHonour) {
  EXPECT_NE(error("{}", "m2").find("measured on another model"), std::string::npos);
  EXPECT_NE(error("{}", "m1", "agentkv-relay-profile").find("format"), std::string::npos);
  EXPECT_NE(error(R"({"nosuch": {}})").find("nosuch"), std::string::npos);
  EXPECT_NE(error(R"({"alora+sparsex": {"ratio": 0.5}})").find("not a composition"), std::string::npos);
  // A parameter of another scheme is refused as a request's would be.
  EXPECT_NE(error(R"({"epic": {"ratio": 0.5}})").find("ratio"), std::string::npos);
  EXPECT_NE(error(R"({"epic": {"recompute_tokens": "many"}})").find("recompute_tokens"), std::string::npos);
  EXPECT_NE(error(R"({"epic": {"recompute_tokens": 1e12}})").find("recompute_tokens"), std::string::npos);
  // 2^64 - 1 would wrap to -1 through a signed read.
  EXPECT_NE(error(R"({"epic": {"recompute_tokens": 18446744073709551615}})").find("not a 32-bit integer"),
            std::string::npos);
  // Layers are the profiles' (which the schemes read first, with their snapshots).
  EXPECT_NE(error(R"({"relay": {"l_det": 5}})").find("layers come from the scheme's profile"),
            std::string::npos);
  EXPECT_NE(error(R"({"droidspeak": {"critical_layers": [1]}})").find("critical_layers"), std::string::npos);
  EXPECT_NE(error(R"({"epic": {"budget": 3}})").find("not a kv_sharing parameter"), std::string::npos);
  EXPECT_NE(error(R"({"epic": 3})").find("not an object"), std::string::npos);
  EXPECT_NE(error(R"([1])").find("\"schemes\""), std::string::npos);
  std::ofstream(path_) << "not json";
  EXPECT_FALSE(load_scheme_defaults(path_.string(), "m1").is_ok());
  std::ofstream(path_) << R"({"format": "agentkv-scheme-defaults", "model": {"id": "m1"}, "schemes": {}})";
  EXPECT_NE(load_scheme_defaults(path_.string(), "m1").status().message().find("version"), std::string::npos);
  EXPECT_FALSE(load_scheme_defaults(path_.string() + ".absent", "m1").is_ok());
  // Not a file, or far larger than one: refused before reading it.
  EXPECT_NE(load_scheme_defaults(dir_.string(), "m1").status().message().find("not a file"),
            std::string::npos);
  std::filesystem::resize_file(path_, 2 << 20);
  EXPECT_NE(load_scheme_defaults(path_.string(), "m1").status().message().find("larger"), std::string::npos);
}

// The file is also what --profile-dir finds by model id.
TEST_F(SchemeDefaultsFile, IsFoundByModelId) {
  ASSERT_TRUE(load("{}").is_ok());
  EXPECT_EQ(find_profile(dir_.string(), kSchemeDefaultsSuffix, kSchemeDefaultsFormat, "m1"), path_.string());
  EXPECT_EQ(find_profile(dir_.string(), kSchemeDefaultsSuffix, kSchemeDefaultsFormat, "m2"), "");
}

TEST(SchemeDefaults, ARequestsOwnThenTheServersThenTheModelsThenTheSchemes) {
  SchemeDefaults file;
  file["sparsex"].ratio = 0.5;
  file["sparsex"].boundary_layer = 0;
  file["cacheblend"].ratio = 0.3;
  const SharingScheme& sparsex = *sharing_scheme_get("sparsex");
  KvSharingParams request, server;
  KvSharingParams p = resolve_params(request, server, file, sparsex);
  EXPECT_EQ(p.ratio, 0.5);
  EXPECT_EQ(p.boundary_layer, 0);
  EXPECT_FALSE(p.tail_tokens.has_value());  // the built-in default, which the planner applies
  server.ratio = 0.2;
  p = resolve_params(request, server, file, sparsex);
  EXPECT_EQ(p.ratio, 0.2);
  EXPECT_EQ(p.boundary_layer, 0);
  request.ratio = 0.9;
  EXPECT_EQ(resolve_params(request, server, file, sparsex).ratio, 0.9);
  // Each scheme its own entry: cacheblend's ratio is not sparsex's.
  EXPECT_EQ(resolve_params({}, {}, file, *sharing_scheme_get("cacheblend")).ratio, 0.3);
  EXPECT_FALSE(resolve_params({}, {}, file, *sharing_scheme_get("epic")).ratio.has_value());
  // A composition takes its segment-reuse part's entry.
  Result<const SharingScheme*> composed = sharing_scheme_find("alora+sparsex");
  ASSERT_TRUE(composed.is_ok()) << composed.status().message();
  EXPECT_EQ(resolve_params({}, {}, file, **composed).ratio, 0.5);
}

}  // namespace
}  // namespace agentkv
