// Where the checkout is, for tests that read data files or the model. It is
// found at run time, not compiled in: a compiled-in absolute path makes every
// test object differ between two clones, so ccache could not share them.
//   1. AGENTKV_SOURCE_DIR (ctest sets it for every test);
//   2. else the nearest folder above the test binary holding CMakePresets.json
//      (a binary run by hand from build/ or build-asan/).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace agentkv::test {

inline std::string source_dir() {
  static const std::string dir = [] {
    if (const char* e = std::getenv("AGENTKV_SOURCE_DIR"); e && *e) return std::string(e);
    std::error_code ec;
    auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
    for (p = p.parent_path(); !ec && !p.empty() && p != p.root_path(); p = p.parent_path())
      if (std::filesystem::exists(p / "CMakePresets.json")) return p.string();
    return std::string(".");
  }();
  return dir;
}

}  // namespace agentkv::test
