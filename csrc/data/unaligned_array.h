// A read-only array of T at any byte address. A Megatron .idx lays its int32 sizes out at
// byte 34 and its int64 arrays wherever the sizes end, so a mapped index cannot be read
// through T*; each element is copied out with memcpy instead, which x86-64 and AArch64
// compile to one unaligned load.
#pragma once

#include <cstddef>
#include <cstring>
#include <iterator>
#include <ranges>
#include <type_traits>

#include "core/error.h"

namespace trident {

template <typename T>
class UnalignedArray {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  UnalignedArray() = default;
  UnalignedArray(const void* data, size_t size) : data_(static_cast<const char*>(data)), size_(size) {}
  // Any contiguous array of T (a vector, a span) reads through the same interface.
  template <std::ranges::contiguous_range R>
    requires std::same_as<std::remove_cv_t<std::ranges::range_value_t<R>>, T>
  UnalignedArray(const R& r) : UnalignedArray(std::ranges::data(r), std::ranges::size(r)) {}  // NOLINT

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T operator[](size_t i) const {
    T v;
    std::memcpy(&v, data_ + i * sizeof(T), sizeof(T));
    return v;
  }
  T back() const { return (*this)[size_ - 1]; }
  UnalignedArray subarray(size_t offset) const {
    TRIDENT_CHECK(offset <= size_, "subarray at ", offset, " of ", size_);
    return UnalignedArray(data_ + offset * sizeof(T), size_ - offset);
  }

  // Yields the elements by value (enough for range-for and for building a vector).
  class iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = T;
    iterator() = default;
    iterator(const UnalignedArray* a, size_t i) : a_(a), i_(i) {}
    T operator*() const { return (*a_)[i_]; }
    iterator& operator++() {
      ++i_;
      return *this;
    }
    iterator operator++(int) {
      iterator old = *this;
      ++i_;
      return old;
    }
    bool operator==(const iterator& o) const { return i_ == o.i_; }

   private:
    const UnalignedArray* a_ = nullptr;
    size_t i_ = 0;
  };
  iterator begin() const { return iterator(this, 0); }
  iterator end() const { return iterator(this, size_); }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace trident
