#include "core/backend.h"

namespace trident {

Backend::Backend(Device device)
    : device_(device),
      allocator_(std::make_unique<CachingAllocator>([this](size_t n) { return raw_alloc(n); },
                                                    [this](void* p) { raw_free(p); })) {}

// Derived destructors have already called release_all_memory(); a cache still alive here
// could not free through the (already destroyed) derived raw_free.
Backend::~Backend() = default;

Buffer Backend::empty(Shape shape, DType dtype) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  return Buffer(allocator_.get(), Tensor(allocator_->allocate(bytes), shape, dtype, device_));
}

Buffer Backend::zeros(Shape shape, DType dtype) {
  Buffer b = empty(shape, dtype);
  fill(b, 0.0f);
  return b;
}

}  // namespace trident
