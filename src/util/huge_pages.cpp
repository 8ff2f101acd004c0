#include "util/huge_pages.h"

#include <sys/mman.h>

namespace agentkv {

namespace {
std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }
}  // namespace

void* huge_pages_map(std::size_t n) {
  // Over-map by one huge page, keep the 2 MiB-aligned span, return the rest.
  const std::size_t len = round_up(n, 4096), span = len + kHugePageBytes;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = round_up(base, kHugePageBytes);
  if (start > base) munmap(raw, start - base);
  if (base + span > start + len) munmap(reinterpret_cast<void*>(start + len), base + span - (start + len));
  const std::size_t whole = len / kHugePageBytes * kHugePageBytes;
#ifdef MADV_HUGEPAGE
  if (whole > 0) madvise(reinterpret_cast<void*>(start), whole, MADV_HUGEPAGE);  // advice: failure is harmless
#endif
  return reinterpret_cast<void*>(start);
}

void huge_pages_unmap(void* p, std::size_t n) {
  if (p != nullptr) munmap(p, round_up(n, 4096));
}

}  // namespace agentkv
