// CachingAllocator: serves tensors from blocks that were freed earlier, so the training
// loop reaches a steady state with no device allocation at all after the first step.
// Buffer: an owning handle that returns its block to the cache when destroyed.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <mutex>

#include "core/tensor.h"

namespace trident {

struct AllocatorStats {
  size_t raw_allocs = 0;        // calls to the device allocator so far
  size_t bytes_reserved = 0;    // held from the device (in use + cached)
  size_t bytes_in_use = 0;
  size_t peak_bytes_in_use = 0;
  size_t peak_bytes_reserved = 0;
  size_t blocks_in_use = 0;     // allocations not yet freed
};

class CachingAllocator {
 public:
  using RawAlloc = std::function<void*(size_t)>;
  using RawFree = std::function<void(void*)>;
  CachingAllocator(RawAlloc alloc, RawFree free);
  ~CachingAllocator();  // returns every cached block to the device

  // Rounded up to 256 bytes; reuses the smallest fitting free block. When the device has no
  // room (RawAlloc throws or returns null) while blocks of other sizes sit in the cache, they
  // are given back and the allocation tried once more.
  void* allocate(size_t bytes);
  void release(void* p);
  void empty_cache();  // frees cached (unused) blocks
  AllocatorStats stats() const;

 private:
  void* raw_alloc_locked(size_t size);
  void empty_cache_locked();

  RawAlloc raw_alloc_;
  RawFree raw_free_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;  // size -> block
  std::map<void*, size_t> in_use_;
  AllocatorStats stats_;
};

class Backend;

// Owning tensor: the memory goes back to the backend's cache on destruction. Move-only.
class Buffer {
 public:
  Buffer() = default;
  Buffer(CachingAllocator* owner, Tensor t) : owner_(owner), t_(t) {}
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept : owner_(o.owner_), t_(o.t_) { o.owner_ = nullptr; o.t_ = Tensor(); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      owner_ = o.owner_;
      t_ = o.t_;
      o.owner_ = nullptr;
      o.t_ = Tensor();
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  const Tensor& t() const { return t_; }
  operator const Tensor&() const { return t_; }  // NOLINT: a Buffer is usable wherever a view is
  bool empty() const { return t_.empty(); }
  void reset() {
    if (owner_ && t_.data) owner_->release(t_.data);
    owner_ = nullptr;
    t_ = Tensor();
  }

 private:
  CachingAllocator* owner_ = nullptr;
  Tensor t_;
};

}  // namespace trident
