#include "core/allocator.h"

#include <algorithm>

#include "core/error.h"

namespace trident {

CachingAllocator::CachingAllocator(RawAlloc alloc, RawFree free)
    : raw_alloc_(std::move(alloc)), raw_free_(std::move(free)) {}

CachingAllocator::~CachingAllocator() {
  empty_cache();
  // Blocks still in use at teardown belong to leaked Buffers; free them too.
  for (auto& [p, size] : in_use_) raw_free_(p);
}

void* CachingAllocator::allocate(size_t bytes) {
  const size_t size = ((bytes == 0 ? 1 : bytes) + 255) / 256 * 256;
  std::lock_guard<std::mutex> lock(mu_);
  // Reuse the smallest cached block that fits without wasting more than half of it.
  auto it = free_.lower_bound(size);
  void* p = nullptr;
  size_t got = size;
  if (it != free_.end() && it->first <= 2 * size) {
    p = it->second;
    got = it->first;
    free_.erase(it);
  } else {
    p = raw_alloc_locked(size);
    ++stats_.raw_allocs;
    stats_.bytes_reserved += size;
    stats_.peak_bytes_reserved = std::max(stats_.peak_bytes_reserved, stats_.bytes_reserved);
  }
  in_use_[p] = got;
  stats_.bytes_in_use += got;
  ++stats_.blocks_in_use;
  if (stats_.bytes_in_use > stats_.peak_bytes_in_use) stats_.peak_bytes_in_use = stats_.bytes_in_use;
  return p;
}

void* CachingAllocator::raw_alloc_locked(size_t size) {
  void* p = nullptr;
  try {
    p = raw_alloc_(size);
  } catch (const std::exception&) {
    if (free_.empty()) throw;
  }
  if (!p && !free_.empty()) {
    empty_cache_locked();  // cached blocks too small or too large for this request
    p = raw_alloc_(size);
  }
  if (!p) throw Error("out of memory allocating " + std::to_string(size) + " bytes");
  return p;
}

void CachingAllocator::release(void* p) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_use_.find(p);
  TRIDENT_CHECK(it != in_use_.end(), "release of a block this allocator does not own");
  stats_.bytes_in_use -= it->second;
  --stats_.blocks_in_use;
  free_.emplace(it->second, p);
  in_use_.erase(it);
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  empty_cache_locked();
}

void CachingAllocator::empty_cache_locked() {
  for (auto& [size, p] : free_) {
    raw_free_(p);
    stats_.bytes_reserved -= size;
  }
  free_.clear();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace trident
