// What the libFuzzer targets here share: the invariant check, and the seed
// corpus hook scripts/fuzz.sh uses (AGENTKV_FUZZ_WRITE_SEEDS=<dir> <target>
// -runs=0 writes the target's seed files into <dir> and exits).
#pragma once

#include <errno.h>  // program_invocation_short_name (glibc)

#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>

namespace agentkv::fuzz {

// A violated invariant is a crash libFuzzer reports, with the reason.
inline void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "%s: invariant violated: %s\n", program_invocation_short_name, what);
    std::abort();
  }
}

// For LLVMFuzzerInitialize: when AGENTKV_FUZZ_WRITE_SEEDS names a
// directory, write_seeds(dir) fills it and the process exits.
template <typename WriteSeeds>
int write_seeds_if_asked(WriteSeeds&& write_seeds) {
  if (const char* dir = std::getenv("AGENTKV_FUZZ_WRITE_SEEDS")) {
    write_seeds(std::string(dir));
    std::exit(0);
  }
  return 0;
}

// Text seeds: each as <dir>/<prefix>_<i>.json.
inline void write_text_seeds(const std::string& dir, const char* prefix, std::span<const char* const> texts) {
  int i = 0;
  for (const char* text : texts) {
    const std::string path = dir + "/" + prefix + "_" + std::to_string(i++) + ".json";
    if (FILE* f = std::fopen(path.c_str(), "wb")) {
      std::fputs(text, f);
      std::fclose(f);
    }
  }
}

}  // namespace agentkv::fuzz
