// `agentkv serve --adapter NAME=PATH[:kind]`, the config file's "adapters",
// and --kv-sharing.
#include "server/serve_config.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace agentkv::server {
namespace {

using json = nlohmann::json;

AdapterSpec parsed(const std::string& spec) {
  Result<AdapterSpec> r = parse_adapter_spec(spec);
  EXPECT_TRUE(r.is_ok()) << spec << ": " << r.status().message();
  return r.is_ok() ? *r : AdapterSpec{};
}

void expect_spec(const AdapterSpec& s, const std::string& name, const std::string& path, const std::string& kind) {
  EXPECT_EQ(s.name, name);
  EXPECT_EQ(s.path, path);
  EXPECT_EQ(s.kind, kind);
}

TEST(AdapterSpec, NamePathAndOptionalKind) {
  expect_spec(parsed("sql=/adapters/sql"), "sql", "/adapters/sql", "");
  expect_spec(parsed("sql=/adapters/sql:lora"), "sql", "/adapters/sql", "lora");
  expect_spec(parsed("inv=rel/dir:alora"), "inv", "rel/dir", "alora");
  expect_spec(parsed("dec=d:icarus"), "dec", "d", "icarus");
  expect_spec(parsed("a=x.gguf"), "a", "x.gguf", "");
}

TEST(AdapterSpec, OnlyAFinalKnownKindIsAKind) {
  // ':' inside a path stays in the path.
  expect_spec(parsed("a=/data/run:3/adapter"), "a", "/data/run:3/adapter", "");
  expect_spec(parsed("a=/data/x:lora2"), "a", "/data/x:lora2", "");
  expect_spec(parsed("a=/data/x:LORA"), "a", "/data/x:LORA", "");  // kinds are lower case
  expect_spec(parsed("a=/data/x:"), "a", "/data/x:", "");
  expect_spec(parsed("a=/data/lora:x"), "a", "/data/lora:x", "");
  expect_spec(parsed("a=/data/x:alora:lora"), "a", "/data/x:alora", "lora");  // a path ending in :alora
  expect_spec(parsed("a=C:icarus:alora"), "a", "C:icarus", "alora");
  // The name ends at the first '='; later ones belong to the path.
  expect_spec(parsed("a=/p=q"), "a", "/p=q", "");
}

TEST(AdapterSpec, MalformedSpecsAreErrors) {
  for (const char* bad : {"", "sql", "=/p", "sql=", "sql=:lora", "=", "a=:icarus"}) {
    Result<AdapterSpec> r = parse_adapter_spec(bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("--adapter"), std::string::npos) << r.status().message();
  }
}

TEST(AdapterSpec, ConfigListOfStringsOrObjects) {
  const json v = json::parse(R"([
    "a=/p/a:alora",
    {"name": "b", "path": "/p/b:lora"},
    {"name": "c", "path": "/p/c", "kind": "icarus"},
    {"name": "d", "path": "/p/d", "kind": null}
  ])");
  Result<std::vector<AdapterSpec>> r = adapter_specs_from_json(v);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->size(), 4u);
  expect_spec((*r)[0], "a", "/p/a", "alora");
  expect_spec((*r)[1], "b", "/p/b:lora", "");  // an object's path is taken as it is
  expect_spec((*r)[2], "c", "/p/c", "icarus");
  expect_spec((*r)[3], "d", "/p/d", "");
  // One item alone.
  Result<std::vector<AdapterSpec>> one = adapter_specs_from_json(json("x=/p/x"));
  ASSERT_TRUE(one.is_ok());
  ASSERT_EQ(one->size(), 1u);
  expect_spec((*one)[0], "x", "/p/x", "");
  Result<std::vector<AdapterSpec>> empty = adapter_specs_from_json(json::array());
  ASSERT_TRUE(empty.is_ok());
  EXPECT_TRUE(empty->empty());
}

TEST(AdapterSpec, BadConfigEntriesAreErrors) {
  for (const char* bad : {R"([3])", R"([["a=/p"]])", R"([{"name": "a"}])", R"([{"path": "/p"}])",
                          R"([{"name": "", "path": "/p"}])", R"([{"name": "a", "path": 3}])",
                          R"([{"name": "a", "path": "/p", "kind": "qlora"}])",
                          R"([{"name": "a", "path": "/p", "rank": 8}])", R"(["no-equals"])", R"(true)",
                          R"(null)"}) {
    Result<std::vector<AdapterSpec>> r = adapter_specs_from_json(json::parse(bad));
    EXPECT_FALSE(r.is_ok()) << bad;
  }
}

TEST(AdapterSpec, CheckNamesAgainstEachOtherAndTheBase) {
  EXPECT_TRUE(check_adapter_specs({}, "base").is_ok());
  EXPECT_TRUE(check_adapter_specs({{"a", "/p", ""}, {"b", "/p", "alora"}}, "base").is_ok());
  const Status dup = check_adapter_specs({{"a", "/p", ""}, {"a", "/q", ""}}, "base");
  ASSERT_FALSE(dup.is_ok());
  EXPECT_NE(dup.message().find("'a' is given twice"), std::string::npos) << dup.message();
  const Status base = check_adapter_specs({{"base", "/p", ""}}, "base");
  ASSERT_FALSE(base.is_ok());
  EXPECT_NE(base.message().find("served-model-name"), std::string::npos) << base.message();
  EXPECT_FALSE(check_adapter_specs({{"a", "/p", "qlora"}}, "base").is_ok());
  EXPECT_FALSE(check_adapter_specs({{"", "/p", ""}}, "base").is_ok());
  EXPECT_FALSE(check_adapter_specs({{"a", "", ""}}, "base").is_ok());
}

TEST(KvSharing, KnownSchemes) {
  for (const char* ok : {"none", "alora", "icarus"}) EXPECT_TRUE(check_kv_sharing(ok).is_ok()) << ok;
  for (const char* bad : {"", "fullshared", "None", "lragent"}) {
    const Status st = check_kv_sharing(bad);
    ASSERT_FALSE(st.is_ok()) << bad;
    EXPECT_NE(st.message().find("--kv-sharing"), std::string::npos);
  }
}

}  // namespace
}  // namespace agentkv::server
