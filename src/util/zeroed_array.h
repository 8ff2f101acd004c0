// A zero-filled array from calloc. A large calloc is fresh pages from the
// OS, zero without being written, so the parts of a pool that are never used
// are never resident: the KV pools are sized for a budget (--kv-cache-mb),
// and with std::vector's zero fill all of it counted in RSS from the start.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace agentkv {

template <class T>
class ZeroedArray {
 public:
  // False when the memory is refused; the array is then empty.
  bool allocate(size_t n) {
    data_.reset(n > 0 ? static_cast<T*>(std::calloc(n, sizeof(T))) : nullptr);
    size_ = data_ ? n : 0;
    return data_ != nullptr || n == 0;
  }
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return data_.get()[i]; }
  const T& operator[](size_t i) const { return data_.get()[i]; }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
  size_t size_ = 0;
};

}  // namespace agentkv
