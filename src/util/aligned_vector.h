// std::vector whose storage starts on a 64-byte boundary (a cache line, and
// any SIMD width we use). Activation scratch lives in these: measured on this
// machine, prefill 512 on one thread ran 195 tok/s with the runner's scratch
// where malloc put it and 266 tok/s with every allocation 64-byte aligned
// (docs/benchmarks.md, "Aligned scratch"), because the tile kernels' 256-bit
// loads of an activation row that straddles cache lines cost that much.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace agentkv {

template <class T, std::size_t Align = 64>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() noexcept = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U, Align>&) noexcept {}
  template <class U>
  struct rebind {
    using other = AlignedAllocator<U, Align>;
  };
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{Align})); }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t{Align}); }
  friend bool operator==(const AlignedAllocator&, const AlignedAllocator&) noexcept { return true; }
};

template <class T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

}  // namespace agentkv
