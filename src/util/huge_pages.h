// Storage for the model's weight matrices that the kernel may back with
// 2 MiB transparent huge pages. Decode streams every weight byte once per
// token; on 4 KiB pages that is a TLB miss every 4 KiB, and one core then
// streams the q4_K/q6_K records at 20-25 GB/s against 24-30 GB/s on huge
// pages (docs/benchmarks.md, "Weights on huge pages"). Debian and most
// distributions set THP to "madvise", so an allocation gets huge pages only
// if it asks: this allocator maps blocks of 2 MiB or more itself, 2 MiB
// aligned, and advises the whole 2 MiB pages inside them (the partial page
// at the end is not advised, so no block grows the resident set by more
// than its own bytes). Where THP is off the advice is ignored and the
// memory is ordinary pages; smaller blocks come from AlignedAllocator
// (util/aligned_vector.h), so every block starts on a 64-byte boundary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#include "util/aligned_vector.h"

namespace agentkv {

inline constexpr std::size_t kHugePageBytes = std::size_t(2) << 20;

// Under AddressSanitizer every block comes from operator new, so that a read
// past a weight matrix's end hits a redzone (a mapping of our own has none).
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kWeightsMapped = false;
#else
inline constexpr bool kWeightsMapped = true;
#endif

// n bytes mapped for huge pages (above), or nullptr when the map fails.
void* huge_pages_map(std::size_t n);
void huge_pages_unmap(void* p, std::size_t n);

template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() noexcept = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    if (!kWeightsMapped || bytes < kHugePageBytes) return AlignedAllocator<T>().allocate(n);
    void* p = huge_pages_map(bytes);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    const std::size_t bytes = n * sizeof(T);
    if (!kWeightsMapped || bytes < kHugePageBytes) {
      AlignedAllocator<T>().deallocate(p, n);
    } else {
      huge_pages_unmap(p, bytes);
    }
  }
  friend bool operator==(const HugePageAllocator&, const HugePageAllocator&) noexcept { return true; }
};

template <class T>
using HugePageVector = std::vector<T, HugePageAllocator<T>>;
// A weight matrix's bytes (DenseTensor::packed, the CPU backend's records).
using WeightBytes = HugePageVector<uint8_t>;

}  // namespace agentkv
