// Tensor: a non-owning, contiguous, row-major view of memory on one device.
// Ownership lives in Buffer (allocator.h); ops take and return views.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace trident {

enum class Device : uint8_t { Cpu, Cuda };

// Five: the query, key and value of new tokens over a KV cache are [B, T, 3, H, D].
inline constexpr int kMaxDims = 5;

struct Shape {
  std::array<int64_t, kMaxDims> dims{};
  int ndim = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d) {
    TRIDENT_CHECK(d.size() <= kMaxDims, "too many dims");
    for (int64_t v : d) dims[ndim++] = v;
  }
  // Product of dims [begin, end); 1 for an empty range. Sizes are products over ranges,
  // never quotients: numel() / dims[i] divides by zero for a shape with a zero dimension.
  int64_t product(int begin, int end) const {
    int64_t n = 1;
    for (int i = begin; i < end; ++i) n *= dims[i];
    return n;
  }
  int64_t numel() const { return product(0, ndim); }
  int64_t operator[](int i) const { return dims[i]; }
  bool operator==(const Shape& o) const {
    if (ndim != o.ndim) return false;
    for (int i = 0; i < ndim; ++i)
      if (dims[i] != o.dims[i]) return false;
    return true;
  }
  std::string str() const;
};

// Elements of a shape held as a vector (the checkpoint formats' tensors); 1 for a scalar's.
inline int64_t numel_of(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

struct Tensor {
  void* data = nullptr;
  Shape shape;
  DType dtype = DType::F32;
  Device device = Device::Cpu;

  Tensor() = default;
  Tensor(void* d, Shape s, DType t, Device dev) : data(d), shape(s), dtype(t), device(dev) {}

  bool empty() const { return data == nullptr; }
  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  int ndim() const { return shape.ndim; }
  int64_t size(int d) const { return shape.dims[d < 0 ? d + shape.ndim : d]; }
  // Product of all dims but the last: the "rows" of a row-major matrix view.
  int64_t rows() const { return shape.product(0, shape.ndim - 1); }
  int64_t cols() const { return shape.ndim == 0 ? 1 : shape.dims[shape.ndim - 1]; }

  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }

  // Same memory, new shape (numel must match).
  Tensor view(Shape s) const {
    TRIDENT_CHECK(s.numel() == numel(), "view ", s.str(), " of ", shape.str());
    return Tensor(data, s, dtype, device);
  }
  // Rows [start, start+count) along dim 0, still contiguous.
  Tensor rows_slice(int64_t start, int64_t count) const {
    TRIDENT_CHECK(start >= 0 && count >= 0 && start + count <= shape.dims[0], "rows_slice out of range");
    const int64_t row_elems = shape.product(1, shape.ndim);
    Shape s = shape;
    s.dims[0] = count;
    return Tensor(static_cast<char*>(data) + start * row_elems * dtype_size(dtype), s, dtype, device);
  }
  // Flat elements [start, start+count) as a 1-D view.
  Tensor flat_slice(int64_t start, int64_t count) const {
    TRIDENT_CHECK(start >= 0 && start + count <= numel(), "flat_slice out of range");
    return Tensor(static_cast<char*>(data) + start * dtype_size(dtype), Shape{count}, dtype, device);
  }
};

}  // namespace trident
