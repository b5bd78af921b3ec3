#include "ckpt/checksum.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace trident {

Xxh3Hasher::Xxh3Hasher() : state_(XXH3_createState()) {
  if (!state_) throw InternalError("XXH3_createState failed");
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}
Xxh3Hasher::~Xxh3Hasher() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void Xxh3Hasher::update(const void* data, size_t n) {
  if (n == 0) return;
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, n);
}
uint64_t Xxh3Hasher::value() const { return XXH3_64bits_digest(static_cast<XXH3_state_t*>(state_)); }
std::string Xxh3Hasher::hex() const { return xxh3_hex(value()); }

std::string xxh3_hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string checksum_bytes(const void* data, size_t n) { return xxh3_hex(XXH3_64bits(data, n)); }

namespace {
// Hashes the file; returns its size in *size.
std::string hash_file(const std::string& path, uint64_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError(path + ": cannot open for checksum: " + std::strerror(errno));
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::vector<char> buf(size_t{4} << 20);
  Xxh3Hasher h;
  uint64_t total = 0;
  for (;;) {
    const ssize_t r = ::read(fd, buf.data(), buf.size());
    if (r < 0) {
      if (errno == EINTR) continue;
      const std::string e = std::strerror(errno);
      ::close(fd);
      throw IoError(path + ": read failed during checksum: " + e);
    }
    if (r == 0) break;
    h.update(buf.data(), static_cast<size_t>(r));
    total += static_cast<uint64_t>(r);
  }
  ::close(fd);
  *size = total;
  return h.hex();
}
}  // namespace

std::string checksum_file(const std::string& path) {
  uint64_t size = 0;
  return hash_file(path, &size);
}

void verify_file(const std::string& path, const std::string& expected, int64_t expected_size) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw IoError(path + ": missing checkpoint file (" + std::strerror(errno) + ")");
  if (expected_size >= 0 && st.st_size != expected_size) {
    throw IoError(path + ": " + (st.st_size < expected_size ? "truncated" : "size mismatch") + ": " +
                  std::to_string(st.st_size) + " bytes, expected " + std::to_string(expected_size));
  }
  uint64_t size = 0;
  const std::string got = hash_file(path, &size);
  if (expected_size >= 0 && size != static_cast<uint64_t>(expected_size))
    throw IoError(path + ": truncated while reading: " + std::to_string(size) + " bytes, expected " +
                  std::to_string(expected_size));
  if (got != expected)
    throw IoError(path + ": checksum mismatch (xxh3 " + got + ", expected " + expected +
                  "): file is corrupt");
}

}  // namespace trident
