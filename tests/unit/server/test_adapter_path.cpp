// confine_adapter_path: a runtime adapter path stays inside --lora-dir.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "server/adapter_path.h"

namespace agentkv::server {
namespace {

namespace fs = std::filesystem;

class AdapterPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/agentkv-adapter-path-XXXXXX";
    root_ = fs::canonical(::mkdtemp(tmpl)).string();
    dir_ = root_ + "/lora";
    fs::create_directories(dir_ + "/peft");
    std::ofstream(dir_ + "/peft/adapter_config.json") << "{}";
    std::ofstream(dir_ + "/a.gguf") << "GGUF";
    std::ofstream(root_ + "/secret") << "root:x:0:0";
  }
  void TearDown() override { fs::remove_all(root_); }

  // The error's status, or 200 with the resolved path in *out.
  int status_of(const std::string& requested, std::string* out = nullptr) {
    ApiResult<std::string> r = confine_adapter_path(dir_, requested);
    if (r.ok()) {
      if (out) *out = r.value();
      return 200;
    }
    EXPECT_EQ(r.error().param, "lora_path") << requested;
    EXPECT_EQ(r.error().message.find("root:x"), std::string::npos) << r.error().message;
    return r.error().status;
  }

  std::string root_, dir_;
};

TEST_F(AdapterPathTest, InsideTheDirResolves) {
  std::string out;
  EXPECT_EQ(status_of("peft", &out), 200);
  EXPECT_EQ(out, dir_ + "/peft");
  EXPECT_EQ(status_of("./a.gguf", &out), 200);
  EXPECT_EQ(out, dir_ + "/a.gguf");
  EXPECT_EQ(status_of(dir_ + "/peft/", &out), 200);  // absolute, inside
  EXPECT_EQ(out, dir_ + "/peft");
  fs::create_symlink(dir_ + "/a.gguf", dir_ + "/alias.gguf");  // a symlink that stays inside is fine
  EXPECT_EQ(status_of("alias.gguf", &out), 200);
  EXPECT_EQ(out, dir_ + "/a.gguf");
}

TEST_F(AdapterPathTest, OutsideIsRefused) {
  EXPECT_EQ(status_of("/etc/passwd"), 400);
  EXPECT_EQ(status_of("/dev/zero"), 400);
  EXPECT_EQ(status_of(root_ + "/secret"), 400);
  EXPECT_EQ(status_of("../secret"), 400);
  EXPECT_EQ(status_of("peft/../../secret"), 400);
  EXPECT_EQ(status_of("peft/../a.gguf"), 400);  // ".." is refused even when it would stay inside
  EXPECT_EQ(status_of(dir_), 400);              // the dir itself is no adapter
  EXPECT_EQ(status_of(dir_ + "-sibling/x"), 400);
  EXPECT_EQ(status_of(std::string("a.gguf\0x", 8)), 400);
  EXPECT_EQ(confine_adapter_path("", "/etc/passwd").error().status, 400);  // no dir: nothing loads
}

TEST_F(AdapterPathTest, SymlinksOutAreRefused) {
  fs::create_symlink(root_ + "/secret", dir_ + "/escape");
  fs::create_symlink("/dev/zero", dir_ + "/zero");
  fs::create_symlink(root_, dir_ + "/up");
  EXPECT_EQ(status_of("escape"), 400);
  EXPECT_EQ(status_of("zero"), 400);
  EXPECT_EQ(status_of("up/secret"), 400);
  // A PEFT directory whose file leads out.
  fs::create_symlink(root_ + "/secret", dir_ + "/peft/adapter_model.safetensors");
  EXPECT_EQ(status_of("peft"), 400);
}

TEST_F(AdapterPathTest, OnlyRegularFilesAndDirectories) {
  ASSERT_EQ(::mkfifo((dir_ + "/fifo").c_str(), 0600), 0);
  EXPECT_EQ(status_of("fifo"), 400);
  fs::create_directory(dir_ + "/withfifo");
  ASSERT_EQ(::mkfifo((dir_ + "/withfifo/adapter_model.safetensors").c_str(), 0600), 0);
  EXPECT_EQ(status_of("withfifo"), 400);
}

TEST_F(AdapterPathTest, MissingIs404) {
  ApiResult<std::string> r = confine_adapter_path(dir_, "nope");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().status, 404);
  EXPECT_EQ(r.error().code, "adapter_not_found");
  // Outside and missing is refused as outside: nothing is learned of what exists there.
  EXPECT_EQ(status_of("/nonexistent/x"), 400);
}

TEST_F(AdapterPathTest, CanonicalLoraDir) {
  Result<std::string> d = canonical_lora_dir(dir_ + "/peft/..");
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(*d, dir_);
  EXPECT_FALSE(canonical_lora_dir(dir_ + "/a.gguf").is_ok());
  EXPECT_FALSE(canonical_lora_dir(dir_ + "/missing").is_ok());
  EXPECT_FALSE(canonical_lora_dir("").is_ok());
}

}  // namespace
}  // namespace agentkv::server
