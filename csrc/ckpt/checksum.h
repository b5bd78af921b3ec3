// Fast file checksums: XXH3 64-bit (libxxhash), printed as 16 lowercase hex digits of the
// hash's canonical (big-endian) form, the way `xxhsum -H3` prints it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace trident {

// Streaming XXH3-64 (seed 0).
class Xxh3Hasher {
 public:
  Xxh3Hasher();
  ~Xxh3Hasher();
  Xxh3Hasher(const Xxh3Hasher&) = delete;
  Xxh3Hasher& operator=(const Xxh3Hasher&) = delete;
  void update(const void* data, size_t n);
  uint64_t value() const;
  std::string hex() const;

 private:
  void* state_;
};

std::string xxh3_hex(uint64_t h);
// Checksum of a memory range.
std::string checksum_bytes(const void* data, size_t n);
// Checksum of a file mapped read-only at `data` (n bytes): helper threads fault the pages
// in (MADV_POPULATE_READ) windows ahead of the hash, so the disk is kept busy, the pages
// end up mapped for the caller, and no byte is copied. A read error is an IoError naming
// `path`. (Like any mapping, a file truncated under it meanwhile raises SIGBUS.)
std::string checksum_mapped(const std::string& path, const void* data, size_t n);
// Checksum of a whole file; throws IoError naming the file.
std::string checksum_file(const std::string& path);
// Throws IoError naming the file when it is missing, its size differs from
// `expected_size` (when >= 0: "truncated" when shorter) or its checksum differs.
void verify_file(const std::string& path, const std::string& expected, int64_t expected_size = -1);
// The two checks of verify_file, for callers that read the file themselves (with the same
// messages): `actual` bytes against `expected_size` (no check when negative), and a
// computed checksum against the expected one.
void check_file_size(const std::string& path, uint64_t actual, int64_t expected_size);
void check_file_checksum(const std::string& path, const std::string& got, const std::string& expected);

}  // namespace trident
