// util/huge_pages: blocks of 2 MiB or more are 2 MiB-aligned and advised
// for transparent huge pages over their whole huge pages only (the kernel's
// own record of the advice, the "hg" flag of /proc/self/smaps); smaller
// blocks are 64-byte aligned; the bytes round-trip through a vector.
#include "util/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/stat.h>

namespace agentkv {
namespace {

// The VmFlags of the mapping that holds address a, or "" when none does.
std::string vm_flags_at(uintptr_t a) {
  std::ifstream f("/proc/self/smaps");
  std::string line;
  bool in = false;
  while (std::getline(f, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (line.find("VmFlags:") == 0) {
      if (in) return line;
      continue;
    }
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') in = lo <= a && a < hi;
  }
  return "";
}

bool has_flag(const std::string& flags, const std::string& f) {
  std::istringstream in(flags);
  for (std::string w; in >> w;)
    if (w == f) return true;
  return false;
}

bool kernel_has_thp() {
  struct stat st{};
  return stat("/sys/kernel/mm/transparent_hugepage/enabled", &st) == 0;
}

TEST(HugePages, SmallBlocksAre64ByteAligned) {
  for (size_t n : {1, 63, 4096, 100000, (2 << 20) - 1}) {
    WeightBytes v(n, 0x5a);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % 64, 0u) << n;
    EXPECT_EQ(v[n - 1], 0x5a);
  }
}

TEST(HugePages, LargeBlocksAreAlignedAdvisedAndRoundTrip) {
  const size_t n = (3 << 20) + 12345;  // one whole huge page and a partial one
  WeightBytes v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(i * 131u + 7u);
  const auto p = reinterpret_cast<uintptr_t>(v.data());
  if (!kWeightsMapped) {  // ASan: operator new's block, with its redzones
    EXPECT_EQ(p % 64, 0u);
    for (size_t i = 0; i < n; i += 4099) ASSERT_EQ(v[i], uint8_t(i * 131u + 7u)) << i;
    return;
  }
  EXPECT_EQ(p % kHugePageBytes, 0u);
  const std::string first = vm_flags_at(p), tail = vm_flags_at(p + kHugePageBytes + 1);
  ASSERT_FALSE(first.empty());
  ASSERT_FALSE(tail.empty());
  // Advised over the whole huge page; the partial one keeps 4 KiB pages, so
  // the block is never resident beyond its bytes.
  EXPECT_EQ(has_flag(first, "hg"), kernel_has_thp()) << first;
  EXPECT_FALSE(has_flag(tail, "hg")) << tail;

  WeightBytes copy = v;
  EXPECT_EQ(copy, v);
  const uint8_t* data = v.data();
  WeightBytes moved = std::move(v);
  EXPECT_EQ(moved.data(), data);  // a move hands the mapping over
  for (size_t i = 0; i < n; i += 4099) ASSERT_EQ(moved[i], uint8_t(i * 131u + 7u)) << i;
}

TEST(HugePages, UnmapReturnsTheMapping) {
  const size_t n = 4 << 20;
  void* p = huge_pages_map(n);
  ASSERT_NE(p, nullptr);
  EXPECT_FALSE(vm_flags_at(reinterpret_cast<uintptr_t>(p)).empty());
  huge_pages_unmap(p, n);
  EXPECT_TRUE(vm_flags_at(reinterpret_cast<uintptr_t>(p)).empty());  // nothing mapped there now
}

}  // namespace
}  // namespace agentkv
