// Arrays computed from a run's data settings (a dataset's index maps, a blend's indices),
// kept in a file between runs and shared by the processes of a node: written once under a
// unique temporary name and renamed into place, then mapped read-only by every reader (the
// pages are the page cache's, held once however many ranks read them). A file is used only
// when its key hash, its shape and its length all match what the reader expects; anything
// else is rebuilt.
//
// Layout, little-endian: magic "TRIDARRS", u64 format version, u64 key hash, u64 scalar count
// S, u64 array count A, u64 scalars[S], A x {u64 element bytes, u64 length}, then each array
// padded to a multiple of 8 bytes (so every array of a mapped file is 8-byte aligned).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/mapped_files.h"

namespace trident {

// FNV-1a of a cache key (the text of everything the arrays depend on).
uint64_t cache_key_hash(const std::string& key);

struct CacheArray {
  const void* data = nullptr;
  uint64_t length = 0;
  uint32_t element_bytes = 0;
};
template <typename T>
CacheArray cache_array(const std::vector<T>& v) {
  return {v.data(), v.size(), static_cast<uint32_t>(sizeof(T))};
}

// Writes the file (first removing temporaries of writers that died, with a note naming
// `what` built them, e.g. "an index-map build"); false, with a warning naming the file and
// saying the arrays stay in memory, when it cannot.
bool save_array_cache(const std::string& path, uint64_t key_hash, std::span<const uint64_t> scalars,
                      std::span<const CacheArray> arrays, const char* what);

// How many save_array_cache calls of this process failed so far.
uint64_t cache_write_failures();

// While one lives, save_array_cache's "cannot write" warning is not printed (the failure is
// still returned). The ranks that build after world rank 0 hold one when rank 0 could not
// write its caches: it has said so once for the job.
class QuietCacheWarnings {
 public:
  QuietCacheWarnings();
  ~QuietCacheWarnings();
  QuietCacheWarnings(const QuietCacheWarnings&) = delete;
  QuietCacheWarnings& operator=(const QuietCacheWarnings&) = delete;
};

class MappedArrayCache {
 public:
  // Maps path when it holds key_hash, `scalars` scalars and arrays of these element sizes;
  // nullopt when it is absent or anything differs.
  static std::optional<MappedArrayCache> open(const std::string& path, uint64_t key_hash, size_t scalars,
                                              std::span<const uint32_t> element_bytes);
  uint64_t scalar(size_t i) const { return scalars_.at(i); }
  template <typename T>
  std::span<const T> array(size_t i) const {
    const auto& [data, length] = arrays_.at(i);
    return {reinterpret_cast<const T*>(data), length};
  }

 private:
  ReadOnlyMapping map_;
  std::vector<uint64_t> scalars_;
  std::vector<std::pair<const char*, uint64_t>> arrays_;
};

}  // namespace trident
