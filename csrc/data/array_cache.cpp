#include "data/array_cache.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>

#include "core/error.h"
#include "core/process_id.h"

namespace trident {
namespace {

constexpr char kMagic[8] = {'T', 'R', 'I', 'D', 'A', 'R', 'R', 'S'};
constexpr uint64_t kFormatVersion = 1;
constexpr uint64_t kFixedHeader = 8 + 4 * 8;  // magic, version, hash, S, A

uint64_t padded(uint64_t bytes) { return (bytes + 7) / 8 * 8; }

bool write_bytes(std::FILE* f, const void* p, uint64_t n) { return n == 0 || std::fwrite(p, 1, n, f) == n; }

std::atomic<int> quiet_holders{0};
std::atomic<uint64_t> write_failures{0};

}  // namespace

uint64_t cache_key_hash(const std::string& key) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : key) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

bool save_array_cache(const std::string& path, uint64_t key_hash, std::span<const uint64_t> scalars,
                      std::span<const CacheArray> arrays, const char* what) {
  // A build killed while writing this file left its temporary (gigabytes for long runs).
  for (const std::string& stale : remove_dead_writers_files({path}, /*then_suffix=*/true))
    std::fprintf(stderr, "trident: removed %s, left by %s whose process is gone\n", stale.c_str(), what);
  // Unique across threads, processes and hosts sharing the folder (containers reuse pids).
  std::random_device rd;
  std::ostringstream tmp;
  tmp << path << host_temp_tag() << ::getpid() << "." << std::hex << ((uint64_t{rd()} << 32) ^ rd());
  const std::string tmp_path = tmp.str();
  std::vector<uint64_t> header = {kFormatVersion, key_hash, scalars.size(), arrays.size()};
  header.insert(header.end(), scalars.begin(), scalars.end());
  for (const CacheArray& a : arrays) {
    header.push_back(a.element_bytes);
    header.push_back(a.length);
  }
  const char padding[8] = {};
  // Each array goes straight to the file: a copy in one buffer would double the memory of
  // the largest step of a run's start.
  std::FILE* f = std::fopen(tmp_path.c_str(), "wb");
  bool ok = f && write_bytes(f, kMagic, 8) && write_bytes(f, header.data(), header.size() * 8);
  for (const CacheArray& a : arrays) {
    const uint64_t bytes = a.length * a.element_bytes;
    ok = ok && write_bytes(f, a.data, bytes) && write_bytes(f, padding, padded(bytes) - bytes);
  }
  int saved_errno = errno;
  if (f && std::fclose(f) != 0 && ok) {
    ok = false;
    saved_errno = errno;
  }
  if (ok && std::rename(tmp_path.c_str(), path.c_str()) != 0) {
    ok = false;
    saved_errno = errno;
  }
  if (!ok) {
    write_failures.fetch_add(1);
    if (quiet_holders.load() == 0)
      std::fprintf(stderr, "trident: warning: cannot write the index cache %s (%s); keeping it in memory\n",
                   path.c_str(), std::strerror(saved_errno));
    std::remove(tmp_path.c_str());
  }
  return ok;
}

uint64_t cache_write_failures() { return write_failures.load(); }

QuietCacheWarnings::QuietCacheWarnings() { quiet_holders.fetch_add(1); }
QuietCacheWarnings::~QuietCacheWarnings() { quiet_holders.fetch_sub(1); }

std::optional<MappedArrayCache> MappedArrayCache::open(const std::string& path, uint64_t key_hash, size_t scalars,
                                                       std::span<const uint32_t> element_bytes) {
  MappedArrayCache c;
  uint64_t len = 0;
  try {
    c.map_ = map_file_read_only(path, len);
  } catch (const IoError&) {  // absent, not a file, unmappable: rebuilt
    return std::nullopt;
  }
  const uint64_t header_bytes = kFixedHeader + 8 * scalars + 16 * element_bytes.size();
  if (len < header_bytes) return std::nullopt;
  const char* p = c.map_.data();
  auto u64 = [&](uint64_t at) {
    uint64_t v;
    std::memcpy(&v, p + at, 8);
    return v;
  };
  if (std::memcmp(p, kMagic, 8) != 0 || u64(8) != kFormatVersion || u64(16) != key_hash || u64(24) != scalars ||
      u64(32) != element_bytes.size())
    return std::nullopt;
  for (size_t i = 0; i < scalars; ++i) c.scalars_.push_back(u64(kFixedHeader + 8 * i));
  uint64_t at = header_bytes;
  for (size_t i = 0; i < element_bytes.size(); ++i) {
    const uint64_t field = kFixedHeader + 8 * scalars + 16 * i;
    const uint64_t bytes_each = u64(field), length = u64(field + 8);
    // Overflow-safe: the length is bounded by what is left of the file before multiplying.
    if (bytes_each != element_bytes[i] || length > (len - at) / bytes_each) return std::nullopt;
    c.arrays_.emplace_back(p + at, length);
    at += padded(length * bytes_each);
    if (at > len) return std::nullopt;
  }
  if (at != len) return std::nullopt;
  return c;
}

}  // namespace trident
